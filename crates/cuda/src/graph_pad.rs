//! Decode rounds padded to batch-size buckets before they are recorded (graph.rs), so a serving
//! batch whose size moves by a few rows replays one recording instead of capturing many. A pad
//! row is token 0 at position 0, a sequence of its own whose one block is the pools' scratch
//! block (ops.rs `kv` allocates one past the pool's blocks; no sequence's table names it): it
//! writes and reads only there; in a model with recurrent state its state slot is `u32::MAX` (-1
//! to the state kernels, which leave it out). Every kernel computes a row from that row alone,
//! so the real rows' values are the bits they have unpadded; the recording's output is copied
//! out without the pad rows.

use tf_backend::{AttnMeta, Round, SeqAttn};

/// The rows a recording of a round of `rows` rows is made for: 1, 2, 4, 8, then multiples of 8.
pub(crate) fn bucket(rows: usize) -> usize {
    if rows <= 8 { rows.next_power_of_two() } else { rows.next_multiple_of(8) }
}

/// A decode round's inputs with pad rows appended.
pub(crate) struct Padded {
    ids: Vec<u32>,
    positions: Vec<u32>,
    meta: AttnMeta,
}

impl Padded {
    /// `r` (one row a sequence) with rows appended up to `rows`, each reading and writing only
    /// block `scratch`.
    pub(crate) fn new<H>(r: &Round<'_, H>, rows: usize, scratch: u32) -> Padded {
        let (mut ids, mut positions, mut meta) = (r.ids.to_vec(), r.positions.to_vec(), r.meta.clone());
        let slot = scratch as usize * meta.block_size;
        let stateful = !meta.state_slots.is_empty() && meta.state_slots.len() == meta.seqs.len();
        for q_start in r.ids.len()..rows {
            ids.push(0);
            positions.push(0);
            meta.slot_mapping.push(slot);
            meta.seqs.push(SeqAttn { q_start, q_len: 1, start_pos: 0, block_table: vec![scratch] });
            if stateful {
                meta.state_slots.push(u32::MAX);
            }
        }
        Padded { ids, positions, meta }
    }

    /// The padded round of `r` (held ids stay with their rows: a pad row's index, 0, is left
    /// as the pad's id, since only the real rows are gathered).
    pub(crate) fn round<'a, 'b: 'a, H>(&'a self, r: &Round<'b, H>) -> Round<'a, H> {
        Round {
            replayable: r.replayable,
            model: r.model,
            ids: &self.ids,
            held: r.held,
            positions: &self.positions,
            meta: &self.meta,
            group: r.group,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_to_eight_then_multiples_of_eight() {
        let got: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 63, 64, 65, 127, 128].map(bucket).to_vec();
        assert_eq!(got, [1, 2, 4, 4, 8, 8, 16, 16, 24, 64, 64, 72, 128, 128]);
    }

    #[test]
    fn pad_rows_are_token_zero_at_zero_in_the_scratch_block() {
        let seq =
            |q_start, start_pos, table: &[u32]| SeqAttn { q_start, q_len: 1, start_pos, block_table: table.to_vec() };
        let meta = AttnMeta {
            state_slots: Vec::new(),
            seqs: vec![seq(0, 40, &[3, 5, 2]), seq(1, 7, &[1])],
            slot_mapping: vec![72, 23],
            block_size: 16,
        };
        let r: Round<'_> = Round {
            replayable: true,
            model: [9, 4],
            ids: &[11, 12],
            held: None,
            positions: &[40, 7],
            meta: &meta,
            group: 2,
        };
        let p = Padded::new(&r, 4, 6);
        let pr = p.round(&r);
        assert_eq!((pr.ids, pr.positions, pr.model, pr.group), (&[11, 12, 0, 0][..], &[40, 7, 0, 0][..], [9, 4], 2));
        assert_eq!(pr.meta.slot_mapping, [72, 23, 96, 96]);
        assert_eq!(pr.meta.seqs[..2], meta.seqs[..]);
        assert_eq!(pr.meta.seqs[2..], [seq(2, 0, &[6]), seq(3, 0, &[6])]);
        assert_eq!(pr.meta.positions(), [40, 7, 0, 0]);
        assert!(pr.meta.state_slots.is_empty(), "no state, no slots");
        // With state slots, a pad row's is u32::MAX (-1 to the state kernels: no state).
        let stateful = AttnMeta { state_slots: vec![5, 2], ..meta.clone() };
        let r = Round { meta: &stateful, ..r };
        let p = Padded::new(&r, 4, 6);
        assert_eq!(p.round(&r).meta.state_slots, [5, 2, u32::MAX, u32::MAX]);
    }
}
