//! The inputs of a decode round being recorded into a CUDA graph (graph.rs), as the ops look them
//! up: while a capture is open, an op that would upload the round's token ids, positions,
//! recurrent-state tables or attention metadata reads them from the recording's input buffer
//! instead, so a replay that uploads new inputs there re-runs the recorded launches on them.

use crate::attn_meta::Packed;
use crate::device::{Device, ptr};
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::{Arc, Mutex};
use tf_backend::{AttnMeta, Round};

/// A round's inputs as the ops read them during a capture (host values and their device copy).
pub(crate) struct Inputs {
    pub(crate) buf: CudaSlice<u32>,
    pub(crate) ids: Vec<u32>,
    pub(crate) positions: Vec<u32>,
    /// The state kernels' sequence table ([`state_table`]; empty for a model without state).
    pub(crate) states: Vec<u32>,
    /// Each row's sequence in it ([`row_table`]; empty likewise).
    pub(crate) row_seq: Vec<u32>,
    pub(crate) meta: Packed,
}

/// Which input an op looks up.
#[derive(Clone, Copy)]
pub(crate) enum Input {
    Ids,
    Positions,
    States,
    RowSeq,
}

/// A round's sequences as the recurrent-state kernels read them, `{q_start, q_len, start_pos,
/// slot}` each (i32 on the device; a pad row's slot `u32::MAX`, -1 there: no state).
pub(crate) fn state_table(meta: &AttnMeta) -> Vec<u32> {
    let rows = meta.seqs.iter().zip(&meta.state_slots);
    rows.flat_map(|(s, &slot)| [s.q_start as u32, s.q_len as u32, s.start_pos as u32, slot]).collect()
}

/// Each of `rows` rows' index into [`state_table`] (`u32::MAX`, -1 on the device, for a row of
/// no sequence); empty where the round has no state slots.
pub(crate) fn row_table(meta: &AttnMeta, rows: usize) -> Vec<u32> {
    if meta.state_slots.is_empty() {
        return Vec::new();
    }
    let mut out = vec![u32::MAX; rows];
    for (i, s) in meta.seqs.iter().zip(&meta.state_slots).map(|(s, _)| s).enumerate() {
        for r in out.iter_mut().skip(s.q_start).take(s.q_len) {
            *r = i as u32;
        }
    }
    out
}

/// A table an op hands a kernel: uploaded for it, or found in an open capture's inputs.
pub(crate) enum Table {
    Owned(CudaSlice<u32>),
    At(u64),
}

impl Table {
    /// Its device address.
    pub(crate) fn ptr(&self, stream: &CudaStream) -> u64 {
        match self {
            Table::Owned(s) => ptr(s, stream),
            Table::At(p) => *p,
        }
    }
}

impl Inputs {
    /// `[ids | positions | state table | row table | metadata, zero padded to cap]`.
    pub(crate) fn host<H>(r: &Round<'_, H>, meta: &Packed, cap: usize) -> Vec<u32> {
        let (states, rows) = (state_table(r.meta), row_table(r.meta, r.ids.len()));
        let head = 2 * r.ids.len() + states.len() + rows.len();
        let mut all = Vec::with_capacity(head + cap);
        all.extend_from_slice(r.ids);
        all.extend_from_slice(r.positions);
        all.extend_from_slice(&states);
        all.extend_from_slice(&rows);
        all.extend_from_slice(&meta.host);
        all.resize(head + cap, 0);
        all
    }

    fn offset(&self, which: Input) -> usize {
        match which {
            Input::Ids => 0,
            Input::Positions => self.ids.len(),
            Input::States => self.ids.len() + self.positions.len(),
            Input::RowSeq => self.ids.len() + self.positions.len() + self.states.len(),
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
            Input::States => &i.states,
            Input::RowSeq => &i.row_seq,
        };
        (host.as_slice() == data).then(|| ptr(&i.buf, i.buf.stream()) + 4 * i.offset(which) as u64)
    }

    /// Table `host` of input `which` for a kernel: the open capture's copy where it is that
    /// input, else uploaded (which, inside a capture, spoils it).
    pub(crate) fn table(&self, dev: &Device, which: Input, host: &[u32]) -> Table {
        match self.input(which, host) {
            Some(p) => Table::At(p),
            None => Table::Owned(dev.upload(host)),
        }
    }

    /// The state kernels' sequence table of `meta` ([`state_table`]), as [`Active::table`].
    pub(crate) fn states(&self, dev: &Device, meta: &AttnMeta) -> Table {
        self.table(dev, Input::States, &state_table(meta))
    }

    /// The device address of the metadata while a capture is open and `packed` is it.
    pub(crate) fn meta(&self, packed: &Packed) -> Option<u64> {
        let a = self.lock();
        let i = a.as_ref()?;
        let off = i.ids.len() + i.positions.len() + i.states.len() + i.row_seq.len();
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
        // With state slots (the second row a pad row's), the state and row tables come between.
        let s = AttnMeta { state_slots: vec![9, u32::MAX], ..m.clone() };
        let r = Round { meta: &s, ..r };
        let host = Inputs::host(&r, &packed, 1024);
        assert_eq!(host.len(), 2 + 2 + 8 + 2 + 1024);
        assert_eq!(host[4..14], [0, 1, 300, 9, 1, 1, 7, u32::MAX, 0, 1]);
        assert_eq!(host[14..14 + packed.host.len()], packed.host[..]);
    }

    #[test]
    fn rows_name_their_sequences_and_rows_of_none_are_minus_one() {
        let seq = |q_start, q_len| SeqAttn { q_start, q_len, start_pos: 4, block_table: vec![0] };
        let m = AttnMeta {
            state_slots: vec![3, 1],
            seqs: vec![seq(0, 2), seq(3, 1)],
            slot_mapping: vec![],
            block_size: 16,
        };
        assert_eq!(state_table(&m), [0, 2, 4, 3, 3, 1, 4, 1]);
        assert_eq!(row_table(&m, 5), [0, 0, u32::MAX, 1, u32::MAX]);
        assert!(row_table(&AttnMeta { state_slots: vec![], ..m }, 5).is_empty());
    }
}
