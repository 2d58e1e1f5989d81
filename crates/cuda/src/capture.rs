//! The inputs of a decode round being recorded into a CUDA graph (graph.rs), as the ops look them
//! up: while a capture is open, an op that would upload the round's token ids, positions or
//! attention metadata reads them from the recording's input buffer instead, so a replay that
//! uploads new inputs there re-runs the recorded launches on them.

use crate::attn_meta::Packed;
use crate::device::ptr;
use cudarc::driver::CudaSlice;
use std::sync::{Arc, Mutex};
use tf_backend::Round;

/// A round's inputs as the ops read them during a capture (host values and their device copy).
pub(crate) struct Inputs {
    pub(crate) buf: CudaSlice<u32>,
    pub(crate) ids: Vec<u32>,
    pub(crate) positions: Vec<u32>,
    pub(crate) meta: Packed,
}

/// Which input an op looks up.
#[derive(Clone, Copy)]
pub(crate) enum Input {
    Ids,
    Positions,
}

impl Inputs {
    /// `[ids | positions | metadata, zero padded to cap]`.
    pub(crate) fn host<H>(r: &Round<'_, H>, meta: &Packed, cap: usize) -> Vec<u32> {
        let mut all = Vec::with_capacity(2 * r.ids.len() + cap);
        all.extend_from_slice(r.ids);
        all.extend_from_slice(r.positions);
        all.extend_from_slice(&meta.host);
        all.resize(2 * r.ids.len() + cap, 0);
        all
    }

    fn offset(&self, which: Input) -> usize {
        match which {
            Input::Ids => 0,
            Input::Positions => self.ids.len(),
        }
    }
}

/// The inputs of the capture now open, if one is.
#[derive(Default)]
pub(crate) struct Active(Mutex<Option<Arc<Inputs>>>);

impl Active {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Inputs>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (`Some`) or closes (`None`) a capture's inputs.
    pub(crate) fn set(&self, inputs: Option<Arc<Inputs>>) {
        *self.lock() = inputs;
    }

    /// The device address of input `which` while a capture is open and the op's `data` is it.
    pub(crate) fn input(&self, which: Input, data: &[u32]) -> Option<u64> {
        let a = self.lock();
        let i = a.as_ref()?;
        let host = match which {
            Input::Ids => &i.ids,
            Input::Positions => &i.positions,
        };
        (host.as_slice() == data).then(|| ptr(&i.buf, i.buf.stream()) + 4 * i.offset(which) as u64)
    }

    /// The device address of the metadata while a capture is open and `packed` is it.
    pub(crate) fn meta(&self, packed: &Packed) -> Option<u64> {
        let a = self.lock();
        let i = a.as_ref()?;
        let off = i.ids.len() + i.positions.len();
        (i.meta == *packed).then(|| ptr(&i.buf, i.buf.stream()) + 4 * off as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attn_meta::pack;
    use tf_backend::{AttnMeta, SeqAttn};

    #[test]
    fn inputs_are_ids_positions_then_padded_metadata() {
        let m = AttnMeta {
            state_slots: Vec::new(),
            seqs: vec![
                SeqAttn { q_start: 0, q_len: 1, start_pos: 300, block_table: (0..40).collect() },
                SeqAttn { q_start: 1, q_len: 1, start_pos: 7, block_table: (0..40).collect() },
            ],
            slot_mapping: vec![300, 7],
            block_size: 16,
        };
        let r: Round<'_> = Round {
            replayable: true,
            model: [1, 2],
            ids: &[3, 4],
            held: None,
            positions: &[300, 7],
            meta: &m,
            group: 4,
        };
        let packed = pack(&m, 4);
        let host = Inputs::host(&r, &packed, 1024);
        assert_eq!(host.len(), 2 + 2 + 1024);
        assert_eq!(host[..4], [3, 4, 300, 7]);
        assert_eq!(host[4..4 + packed.host.len()], packed.host[..]);
        assert!(host[4 + packed.host.len()..].iter().all(|&v| v == 0));
    }
}
