//! The round plans rank 0 sends its followers: a small binary message (little-endian u32s
//! behind a magic and a tag), never free-form data. A follower trusts none of it: `decode`
//! bounds the message and every count before reading it, and checks every id, block, slot,
//! row and position against its own model and pools before the round runs.

use tf_backend::{AttnMeta, SeqAttn};

/// The largest plan a follower reads.
pub const MAX_PLAN_BYTES: usize = 64 << 20;
const MAGIC: &[u8; 4] = b"TFP1";
const MAX_BLOCK_SIZE: u32 = 1 << 16;

/// Which forward a round runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every layer ([`crate::Decoder::forward`]).
    Full,
    /// The first `n` layers ([`crate::Decoder::forward_layers`]).
    Layers(usize),
    /// Every layer, keeping the normed hidden rows ([`crate::Decoder::forward_hidden`]).
    Hidden,
}

/// One message from rank 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Allocate the cache pools ([`crate::Decoder::alloc_cache`]).
    Alloc { num_blocks: usize, block_size: usize, num_slots: usize },
    /// Run one round.
    Round(RoundPlan),
    /// Copy state slots `(from, to)`, in order, in every state pool
    /// ([`crate::Decoder::copy_state`]).
    CopyState(Vec<(u32, u32)>),
    /// Read KV `blocks` of every pool, and state slot `slot` of every state pool, and hand
    /// them to rank 0 in a gather ([`crate::Decoder::read_blocks`]).
    ReadBlocks { blocks: Vec<u32>, slot: Option<u32> },
    /// Write each follower's part of KV `blocks` and state slot `slot`, laid out as
    /// `ReadBlocks` reads it: `parts[r - 1]` is rank `r`'s ([`crate::Decoder::write_blocks`]).
    WriteBlocks { blocks: Vec<u32>, slot: Option<u32>, parts: Vec<Vec<u8>> },
}

/// One round: what a [`crate::Batch`] holds, ids resolved on rank 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundPlan {
    pub pass: Pass,
    /// Token ids in row order.
    pub ids: Vec<u32>,
    /// Rows whose logits are wanted.
    pub logits_rows: Vec<usize>,
    /// Tokens per block.
    pub block_size: usize,
    /// The sequences, in row order.
    pub seqs: Vec<SeqAttn>,
    /// Each sequence's state slot, or none.
    pub state_slots: Vec<u32>,
}

/// What a follower checks a plan against: its model and its pools.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub vocab: usize,
    pub num_layers: usize,
    pub max_position: usize,
    /// `(num_blocks, block_size, num_slots)` of the pools, once allocated.
    pub pools: Option<(usize, usize, usize)>,
}

/// Why a follower refused a plan.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("refused round plan: {0}")]
pub struct PlanError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, PlanError> {
    Err(PlanError(msg.into()))
}

impl Plan {
    /// The message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = MAGIC.to_vec();
        let put = |v: usize, w: &mut Vec<u8>| w.extend_from_slice(&(v as u32).to_le_bytes());
        match self {
            Plan::Alloc { num_blocks, block_size, num_slots } => {
                w.push(0);
                for v in [num_blocks, block_size, num_slots] {
                    put(*v, &mut w);
                }
            }
            Plan::Round(r) => {
                w.push(1);
                let (pass, layers) = match r.pass {
                    Pass::Full => (0, 0),
                    Pass::Layers(n) => (1, n),
                    Pass::Hidden => (2, 0),
                };
                put(pass, &mut w);
                put(layers, &mut w);
                put(r.block_size, &mut w);
                put(r.ids.len(), &mut w);
                r.ids.iter().for_each(|&i| put(i as usize, &mut w));
                put(r.logits_rows.len(), &mut w);
                r.logits_rows.iter().for_each(|&i| put(i, &mut w));
                put(r.seqs.len(), &mut w);
                for s in &r.seqs {
                    for v in [s.q_start, s.q_len, s.start_pos, s.block_table.len()] {
                        put(v, &mut w);
                    }
                    s.block_table.iter().for_each(|&b| put(b as usize, &mut w));
                }
                put(r.state_slots.len(), &mut w);
                r.state_slots.iter().for_each(|&s| put(s as usize, &mut w));
            }
            Plan::CopyState(copies) => {
                w.push(2);
                put(copies.len(), &mut w);
                for &(from, to) in copies {
                    put(from as usize, &mut w);
                    put(to as usize, &mut w);
                }
            }
            Plan::ReadBlocks { blocks, slot } => {
                w.push(3);
                put_blocks(blocks, *slot, &mut w);
            }
            Plan::WriteBlocks { blocks, slot, parts } => {
                w.push(4);
                put_blocks(blocks, *slot, &mut w);
                put(parts.len(), &mut w);
                for p in parts {
                    put(p.len(), &mut w);
                    w.extend_from_slice(p);
                }
            }
        }
        w
    }

    /// The plan in `bytes`, every field checked against `bounds`.
    pub fn decode(bytes: &[u8], bounds: &Bounds) -> Result<Plan, PlanError> {
        if bytes.len() > MAX_PLAN_BYTES {
            return bad(format!("{} bytes, over the {MAX_PLAN_BYTES}-byte limit", bytes.len()));
        }
        if bytes.get(..4) != Some(MAGIC.as_slice()) {
            return bad("no plan magic");
        }
        let mut r = Reader { bytes, at: 5 };
        let plan = match bytes.get(4) {
            Some(0) => {
                let (num_blocks, block_size, num_slots) = (r.u32()? as usize, r.u32()?, r.u32()? as usize);
                if block_size == 0 || block_size > MAX_BLOCK_SIZE {
                    return bad(format!("block size {block_size} is outside 1..={MAX_BLOCK_SIZE}"));
                }
                Plan::Alloc { num_blocks, block_size: block_size as usize, num_slots }
            }
            Some(1) => Plan::Round(round(&mut r, bounds)?),
            Some(2) => {
                let Some((_, _, num_slots)) = bounds.pools else {
                    return bad("a state copy before the pools were allocated");
                };
                let n = r.count(8)?;
                let copies = (0..n).map(|_| Ok((r.u32()?, r.u32()?))).collect::<Result<Vec<_>, PlanError>>()?;
                if let Some(&(from, to)) =
                    copies.iter().find(|&&(f, t)| f as usize >= num_slots || t as usize >= num_slots)
                {
                    return bad(format!("a state copy {from} -> {to} of {num_slots} slots"));
                }
                Plan::CopyState(copies)
            }
            Some(3) => {
                let (blocks, slot) = blocks(&mut r, bounds)?;
                Plan::ReadBlocks { blocks, slot }
            }
            Some(4) => {
                let (blocks, slot) = blocks(&mut r, bounds)?;
                let n = r.count(4)?;
                let parts = (0..n)
                    .map(|_| {
                        let len = r.count(1)?;
                        r.bytes(len).map(<[u8]>::to_vec)
                    })
                    .collect::<Result<Vec<_>, PlanError>>()?;
                Plan::WriteBlocks { blocks, slot, parts }
            }
            Some(t) => return bad(format!("unknown plan tag {t}")),
            None => return bad("truncated before its tag"),
        };
        if r.at != bytes.len() {
            return bad(format!("{} bytes after the plan", bytes.len() - r.at));
        }
        Ok(plan)
    }
}

impl RoundPlan {
    /// The round's attention metadata (each row's slot from its sequence's block table, as
    /// rank 0 computes it).
    pub fn meta(&self) -> AttnMeta {
        let bs = self.block_size;
        let slot_mapping = (self.seqs.iter())
            .flat_map(|s| {
                (s.start_pos..s.start_pos + s.q_len).map(move |p| s.block_table[p / bs] as usize * bs + p % bs)
            })
            .collect();
        AttnMeta { seqs: self.seqs.clone(), slot_mapping, block_size: bs, state_slots: self.state_slots.clone() }
    }
}

/// `blocks` and an optional `slot` (a flag, then the slot: 0 when none).
fn put_blocks(blocks: &[u32], slot: Option<u32>, w: &mut Vec<u8>) {
    w.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    blocks.iter().for_each(|b| w.extend_from_slice(&b.to_le_bytes()));
    for v in [slot.is_some() as u32, slot.unwrap_or(0)] {
        w.extend_from_slice(&v.to_le_bytes());
    }
}

/// The blocks and slot of a block read or write, each inside the pools.
fn blocks(r: &mut Reader<'_>, bounds: &Bounds) -> Result<(Vec<u32>, Option<u32>), PlanError> {
    let Some((num_blocks, _, num_slots)) = bounds.pools else {
        return bad("a block read or write before the pools were allocated");
    };
    let blocks = r.list()?;
    if let Some(&b) = blocks.iter().find(|&&b| b as usize >= num_blocks) {
        return bad(format!("block {b} of {num_blocks}"));
    }
    let slot = match (r.u32()?, r.u32()?) {
        (0, 0) => None,
        (1, s) if (s as usize) < num_slots => Some(s),
        (1, s) => return bad(format!("state slot {s} of {num_slots}")),
        (f, s) => return bad(format!("slot flag {f} (slot {s})")),
    };
    Ok((blocks, slot))
}

/// A round's fields, each bounded before it is read and checked after.
fn round(r: &mut Reader<'_>, bounds: &Bounds) -> Result<RoundPlan, PlanError> {
    let Some((num_blocks, pool_block_size, num_slots)) = bounds.pools else {
        return bad("a round before the pools were allocated");
    };
    let pass = match (r.u32()?, r.u32()? as usize) {
        (0, 0) => Pass::Full,
        (1, n) if (1..=bounds.num_layers).contains(&n) => Pass::Layers(n),
        (1, n) => return bad(format!("{n} layers of {}", bounds.num_layers)),
        (2, 0) => Pass::Hidden,
        (p, n) => return bad(format!("unknown pass {p} (layers {n})")),
    };
    let block_size = r.u32()? as usize;
    if block_size != pool_block_size {
        return bad(format!("block size {block_size}, the pools' is {pool_block_size}"));
    }
    let ids = r.list()?;
    if let Some(&id) = ids.iter().find(|&&i| i as usize >= bounds.vocab) {
        return bad(format!("token id {id} is outside the vocabulary's {} rows", bounds.vocab));
    }
    let rows = ids.len();
    if rows == 0 || rows > num_blocks.saturating_mul(block_size) {
        return bad(format!("a round of {rows} rows, the pools hold {num_blocks} blocks of {block_size}"));
    }
    let logits_rows: Vec<usize> = r.list()?.into_iter().map(|x| x as usize).collect();
    if let Some(&row) = logits_rows.iter().find(|&&x| x >= rows) {
        return bad(format!("logits row {row} of {rows} rows"));
    }
    let num_seqs = r.count(4)?;
    let mut seqs = Vec::with_capacity(num_seqs);
    let mut next_row = 0;
    for _ in 0..num_seqs {
        let [q_start, q_len, start_pos] = [r.u32()?, r.u32()?, r.u32()?].map(|x| x as usize);
        let block_table = r.list()?;
        if q_start != next_row || q_len == 0 {
            return bad(format!("a sequence of rows {q_start}+{q_len} after row {next_row}"));
        }
        next_row += q_len;
        let end = start_pos.checked_add(q_len);
        if end.is_none_or(|e| e > bounds.max_position || e > block_table.len().saturating_mul(block_size)) {
            return bad(format!(
                "positions {start_pos}+{q_len} beyond its {} blocks or {} positions",
                block_table.len(),
                bounds.max_position
            ));
        }
        if let Some(&b) = block_table.iter().find(|&&b| b as usize >= num_blocks) {
            return bad(format!("block {b} of {num_blocks}"));
        }
        seqs.push(SeqAttn { q_start, q_len, start_pos, block_table });
    }
    if next_row != rows {
        return bad(format!("sequences cover {next_row} of {rows} rows"));
    }
    let state_slots = r.list()?;
    if !(state_slots.is_empty() || state_slots.len() == seqs.len()) {
        return bad(format!("{} state slots for {} sequences", state_slots.len(), seqs.len()));
    }
    if let Some(&s) = state_slots.iter().find(|&&s| s as usize >= num_slots) {
        return bad(format!("state slot {s} of {num_slots}"));
    }
    Ok(RoundPlan { pass, ids, logits_rows, block_size, seqs, state_slots })
}

/// Reads little-endian u32s, refusing to read past the end.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> Result<u32, PlanError> {
        let Some(b) = self.bytes.get(self.at..self.at + 4) else { return bad("truncated") };
        self.at += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count of items of at least `min_bytes` each, no more than the bytes left can hold.
    fn count(&mut self, min_bytes: usize) -> Result<usize, PlanError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.bytes.len() - self.at {
            return bad(format!("a count of {n} past the end of the message"));
        }
        Ok(n)
    }

    /// The next `n` bytes.
    fn bytes(&mut self, n: usize) -> Result<&[u8], PlanError> {
        let Some(b) = self.bytes.get(self.at..self.at.saturating_add(n)) else { return bad("truncated") };
        self.at += n;
        Ok(b)
    }

    /// A counted list of u32s.
    fn list(&mut self) -> Result<Vec<u32>, PlanError> {
        let n = self.count(4)?;
        (0..n).map(|_| self.u32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds { vocab: 100, num_layers: 4, max_position: 64, pools: Some((8, 4, 2)) };

    fn round_plan() -> Plan {
        Plan::Round(RoundPlan {
            pass: Pass::Layers(2),
            ids: vec![1, 2, 3, 99],
            logits_rows: vec![2, 3],
            block_size: 4,
            seqs: vec![
                SeqAttn { q_start: 0, q_len: 3, start_pos: 0, block_table: vec![5] },
                SeqAttn { q_start: 3, q_len: 1, start_pos: 4, block_table: vec![0, 7] },
            ],
            state_slots: vec![0, 1],
        })
    }

    #[test]
    fn plans_round_trip() {
        let p = round_plan();
        assert_eq!(Plan::decode(&p.encode(), &BOUNDS), Ok(p));
        let a = Plan::Alloc { num_blocks: 8, block_size: 4, num_slots: 2 };
        assert_eq!(Plan::decode(&a.encode(), &Bounds { pools: None, ..BOUNDS }), Ok(a));
        let c = Plan::CopyState(vec![(0, 1), (1, 0)]);
        assert_eq!(Plan::decode(&c.encode(), &BOUNDS), Ok(c));
        let bad = Plan::CopyState(vec![(0, 2)]).encode();
        assert!(Plan::decode(&bad, &BOUNDS).expect_err("slot 2 of 2").0.contains("0 -> 2"));
        for p in [
            Plan::ReadBlocks { blocks: vec![7, 0], slot: Some(1) },
            Plan::ReadBlocks { blocks: vec![], slot: None },
            Plan::WriteBlocks { blocks: vec![3], slot: None, parts: vec![vec![1, 2, 3], vec![]] },
            Plan::WriteBlocks { blocks: vec![], slot: Some(0), parts: vec![vec![9; 5]] },
        ] {
            assert_eq!(Plan::decode(&p.encode(), &BOUNDS), Ok(p));
        }
    }

    #[test]
    fn block_reads_and_writes_outside_the_pools_are_refused() {
        let refused = |p: Plan, b: &Bounds| Plan::decode(&p.encode(), b).expect_err("refused").0;
        let read = |blocks: Vec<u32>, slot| Plan::ReadBlocks { blocks, slot };
        assert!(refused(read(vec![0, 8], None), &BOUNDS).contains("block 8 of 8"));
        assert!(refused(read(vec![], Some(2)), &BOUNDS).contains("state slot 2 of 2"));
        let none = Bounds { pools: None, ..BOUNDS };
        assert!(refused(read(vec![0], None), &none).contains("before the pools"));
        let write = Plan::WriteBlocks { blocks: vec![1], slot: None, parts: vec![vec![5; 8]] }.encode();
        // A slot flag other than 0 or 1, and a part longer than the message.
        let mut flag = write.clone();
        flag[13..17].copy_from_slice(&2u32.to_le_bytes());
        assert!(Plan::decode(&flag, &BOUNDS).expect_err("flag").0.contains("slot flag 2"));
        let mut long = write.clone();
        long[25..29].copy_from_slice(&9u32.to_le_bytes());
        assert!(Plan::decode(&long, &BOUNDS).expect_err("long").0.contains("past the end"));
        for n in 0..write.len() {
            assert!(Plan::decode(&write[..n], &BOUNDS).is_err(), "truncated at {n}");
        }
    }

    #[test]
    fn the_slots_are_each_rows_block_table_slot() {
        let Plan::Round(r) = round_plan() else { unreachable!() };
        assert_eq!(r.meta().slot_mapping, vec![20, 21, 22, 28]);
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused_or_in_bounds() {
        let bytes = round_plan().encode();
        for n in 0..bytes.len() {
            assert!(Plan::decode(&bytes[..n], &BOUNDS).is_err(), "truncated at {n}");
        }
        // Any single corrupted byte: refused, or a plan whose every field is in bounds (its
        // metadata builds without indexing out of range).
        for i in 0..bytes.len() {
            for v in [0u8, 1, 7, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] = v;
                if let Ok(Plan::Round(r)) = Plan::decode(&b, &BOUNDS) {
                    let _ = r.meta();
                }
            }
        }
    }

    #[test]
    fn out_of_range_fields_are_refused_by_name() {
        let Plan::Round(r) = round_plan() else { unreachable!() };
        let refused = |r: RoundPlan| Plan::decode(&Plan::Round(r).encode(), &BOUNDS).expect_err("refused").0;
        assert!(refused(RoundPlan { ids: vec![1, 2, 3, 100], ..r.clone() }).contains("token id 100"));
        assert!(refused(RoundPlan { logits_rows: vec![4], ..r.clone() }).contains("logits row 4"));
        let mut s = r.clone();
        s.seqs[1].block_table = vec![0, 8];
        assert!(refused(s).contains("block 8"));
        let mut s = r.clone();
        s.seqs[1].start_pos = 8;
        assert!(refused(s).contains("beyond"));
        let mut s = r.clone();
        s.seqs[1].q_start = 2;
        assert!(refused(s).contains("rows"));
        assert!(refused(RoundPlan { state_slots: vec![0, 2], ..r.clone() }).contains("state slot 2"));
        assert!(refused(RoundPlan { pass: Pass::Layers(5), ..r.clone() }).contains("5 layers"));
        assert!(refused(RoundPlan { block_size: 8, ..r.clone() }).contains("block size"));
        let none = Bounds { pools: None, ..BOUNDS };
        assert!(Plan::decode(&round_plan().encode(), &none).is_err());
    }

    #[test]
    fn an_oversized_count_or_message_is_refused_before_reading() {
        let mut b = MAGIC.to_vec();
        b.push(1);
        for v in [0u32, 0, 4, u32::MAX] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        assert!(Plan::decode(&b, &BOUNDS).expect_err("refused").0.contains("past the end"));
        let huge = vec![0u8; MAX_PLAN_BYTES + 1];
        assert!(Plan::decode(&huge, &BOUNDS).expect_err("refused").0.contains("limit"));
        assert!(Plan::decode(b"TFP1\x09", &BOUNDS).is_err());
        assert!(Plan::decode(b"XXXX\x01", &BOUNDS).is_err());
    }
}
