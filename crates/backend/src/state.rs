//! Fixed-size per-sequence state (the recurrent layers' conv windows and scan states): the shape
//! of one layer's pool of slots, and the host pool the CPU backends keep.
//!
//! A slot is `slot_len()` f32 values: the conv window first (`conv_width` rows of
//! `conv_channels`, oldest first), then `rec_len` values of recurrent state laid out as the
//! layer kind's op says. An op reads a sequence's slot only when the sequence starts past
//! position 0 (`SeqAttn::start_pos > 0`); at position 0 it starts from zeros and overwrites it,
//! so a slot handed to a new sequence needs no clearing.

use crate::BackendError;

/// The shape of one layer's pool of per-sequence state slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateShape {
    /// Slots in the pool (the most sequences that can hold state at once).
    pub num_slots: usize,
    /// Channels of the causal conv window (0: no window).
    pub conv_channels: usize,
    /// Past inputs the conv window keeps (the kernel width minus one).
    pub conv_width: usize,
    /// f32 values of recurrent state after the window.
    pub rec_len: usize,
}

impl StateShape {
    /// f32 values in the conv window.
    pub fn conv_len(&self) -> usize {
        self.conv_channels * self.conv_width
    }

    /// f32 values in one slot.
    pub fn slot_len(&self) -> usize {
        self.conv_len() + self.rec_len
    }

    /// Bytes of one slot as [`HostState::read_slots`] gives them.
    pub fn slot_bytes(&self) -> usize {
        4 * self.slot_len()
    }
}

/// One layer's state pool in host memory: `[num_slots, slot_len]` f32.
#[derive(Clone, Debug)]
pub struct HostState {
    /// The pool's shape.
    pub shape: StateShape,
    /// Every slot's values, slot after slot.
    pub data: Vec<f32>,
}

impl HostState {
    /// A zeroed pool.
    pub fn new(shape: StateShape) -> Result<HostState, BackendError> {
        let n = shape
            .num_slots
            .checked_mul(shape.slot_len())
            .ok_or_else(|| BackendError::Unsupported(format!("state pool {shape:?} is too large")))?;
        Ok(HostState { shape, data: vec![0.0; n] })
    }

    /// Slot `s`'s values.
    pub fn slot(&self, s: u32) -> &[f32] {
        let n = self.shape.slot_len();
        &self.data[s as usize * n..(s as usize + 1) * n]
    }

    /// Slot `s`'s values, to change.
    pub fn slot_mut(&mut self, s: u32) -> &mut [f32] {
        let n = self.shape.slot_len();
        &mut self.data[s as usize * n..(s as usize + 1) * n]
    }

    /// `slots`' values one after another, as little-endian f32 bytes.
    pub fn read_slots(&self, slots: &[u32]) -> Vec<u8> {
        slots.iter().flat_map(|&s| self.slot(s).iter().flat_map(|x| x.to_le_bytes())).collect()
    }

    /// Writes bytes laid out as [`HostState::read_slots`] gives them (length checked by the caller).
    pub fn write_slots(&mut self, slots: &[u32], bytes: &[u8]) {
        let n = self.shape.slot_bytes();
        for (&s, chunk) in slots.iter().zip(bytes.chunks_exact(n)) {
            for (dst, c) in self.slot_mut(s).iter_mut().zip(chunk.chunks_exact(4)) {
                *dst = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
    }

    /// Copies slot `from` over slot `to`.
    pub fn copy_slot(&mut self, from: u32, to: u32) {
        let n = self.shape.slot_len();
        let (f, t) = (from as usize * n, to as usize * n);
        self.data.copy_within(f..f + n, t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_round_trip_and_copy() {
        let shape = StateShape { num_slots: 3, conv_channels: 2, conv_width: 3, rec_len: 4 };
        let mut st = HostState::new(shape).expect("small pool");
        assert_eq!(shape.slot_len(), 10);
        for (i, x) in st.slot_mut(1).iter_mut().enumerate() {
            *x = i as f32 + 0.5;
        }
        let bytes = st.read_slots(&[1]);
        assert_eq!(bytes.len(), shape.slot_bytes());
        st.write_slots(&[2], &bytes);
        assert_eq!(st.slot(2), st.slot(1));
        st.copy_slot(0, 1);
        assert!(st.slot(1).iter().all(|&x| x == 0.0));
        assert_eq!(st.slot(2)[9], 9.5);
    }

    #[test]
    fn an_overflowing_pool_is_refused() {
        let shape = StateShape { num_slots: usize::MAX, conv_channels: 2, conv_width: 3, rec_len: 4 };
        assert!(HostState::new(shape).is_err());
    }
}
