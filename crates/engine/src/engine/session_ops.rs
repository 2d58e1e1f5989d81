//! The engine thread's side of saved sessions: a save runs the ids as a prefill-only sequence
//! (reusing cached blocks) and writes its blocks (and its state slots, after the last token) when
//! the last one is computed; a restore puts an already-checked session's blocks into the prefix
//! cache, block by block, and its state into the snapshot slot of its last block. Under tensor
//! parallelism every rank reads and writes its own part ([`tf_models::Decoder::read_blocks`]).

use super::Core;
use crate::session::{self, CheckedSession};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use tf_backend::Backend;
use tf_core::TokenIds;

/// A save waiting for its sequence's K/V to be computed.
pub(super) struct PendingSave {
    pub(super) path: PathBuf,
    pub(super) reply: Sender<Result<usize, String>>,
}

impl<B: Backend> Core<B> {
    pub(super) fn admit_save(&mut self, ids: TokenIds, path: PathBuf, reply: Sender<Result<usize, String>>) {
        if let Err(why) = &self.sessions {
            let _ = reply.send(Err(why.clone()));
            return;
        }
        let bs = self.sched.pool().block_size();
        let full = ids.len() / bs * bs;
        if full == 0 || full > self.max_seq_tokens {
            let msg = format!(
                "a session holds 1 to {} whole blocks of {bs} tokens; {} tokens given",
                self.max_seq_tokens / bs,
                ids.len()
            );
            let _ = reply.send(Err(msg));
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.sched.add(id, ids.as_slice()[..full].to_vec());
        self.saves.insert(id, PendingSave { path, reply });
    }

    /// Writes the finished save sequence `id` and removes it.
    pub(super) fn complete_save(&mut self, id: u64) {
        let Some(save) = self.saves.remove(&id) else { return };
        let result = match self.sched.seq(id) {
            Some(seq) => self.read_session(&seq.block_table, seq.state_slot, &seq.tokens).and_then(|(layout, s)| {
                session::write(&save.path, &layout, &s).map(|_| s.ids.len()).map_err(|e| e.to_string())
            }),
            None => Err("the session's sequence vanished".into()),
        };
        self.sched.remove(id);
        let _ = save.reply.send(result);
    }

    /// The session of `tokens` in `blocks` (and state `slot`): every rank's K/V and state, split
    /// into the layout's pools (rank 0's, then rank 1's, ...).
    fn read_session(
        &self,
        blocks: &[u32],
        slot: Option<u32>,
        tokens: &[u32],
    ) -> Result<(session::SessionLayout, CheckedSession), String> {
        let layout = self.sessions.clone()?;
        let ids = self.model.vocab.check_u32(tokens).map_err(|e| e.to_string())?;
        let slot = (!self.cache.state.is_empty()).then(|| slot.unwrap_or(0));
        let bs = layout.block_size;
        let parts = (self.model.decoder.read_blocks(&self.backend, &self.cache, bs, blocks, slot))
            .map_err(|e| e.to_string())?;
        let (kv_n, state_n) = (layout.kv_per_rank(), layout.state_per_rank());
        let (mut layers, mut state) = (Vec::new(), Vec::new());
        for (r, part) in parts.iter().enumerate() {
            let mut at = 0;
            for l in r * kv_n..(r + 1) * kv_n {
                let n = 2 * blocks.len() * layout.half_block_bytes(l);
                layers.push(part[at..at + n].to_vec());
                at += n;
            }
            if slot.is_some() {
                for shape in &layout.state[r * state_n..(r + 1) * state_n] {
                    state.push(part[at..at + shape.slot_bytes()].to_vec());
                    at += shape.slot_bytes();
                }
            }
        }
        Ok((layout, CheckedSession { ids, layers, state }))
    }

    /// Puts each block of `s` not already cached into a fresh pool block and caches it.
    pub(super) fn restore(&mut self, s: &CheckedSession) -> Result<usize, String> {
        let layout = self.sessions.clone()?;
        let bs = layout.block_size;
        let num_blocks = s.ids.len() / bs;
        let whole = |l: usize, layer: &Vec<u8>| layer.len() == 2 * num_blocks * layout.half_block_bytes(l);
        let fits = s.layers.len() == layout.kv_widths.len() && s.layers.iter().enumerate().all(|(l, x)| whole(l, x));
        let states = s.state.iter().zip(&layout.state).all(|(x, shape)| x.len() == shape.slot_bytes());
        if !fits || s.state.len() != layout.state.len() || !states {
            return Err(format!(
                "the session has {} KV and {} state layers; the running pools are {} and {}",
                s.layers.len(),
                s.state.len(),
                layout.kv_widths.len(),
                layout.state.len()
            ));
        }
        // Queued copies may write the snapshot slot this restore takes: they run first.
        self.apply_state_copies();
        let mut parent = 0;
        for (i, tokens) in s.ids.as_slice().chunks_exact(bs).enumerate() {
            let hash = self.sched.pool().chain_hash(parent, tokens);
            parent = hash;
            if let Some(b) = self.sched.pool_mut().acquire_cached(hash) {
                self.sched.pool_mut().release(&[b]);
                continue;
            }
            let Some(block) = self.sched.pool_mut().allocate(1) else {
                return Err(format!("the KV pool has no free block for block {i} of {num_blocks}"));
            };
            // Each rank's part: K then V of this block in each of its pools.
            let parts: Vec<Vec<u8>> = (0..layout.ranks)
                .map(|r| {
                    let pools = r * layout.kv_per_rank()..(r + 1) * layout.kv_per_rank();
                    let mut part = Vec::new();
                    for (layer, l) in s.layers[pools.clone()].iter().zip(pools) {
                        let half = layout.half_block_bytes(l);
                        part.extend_from_slice(&layer[i * half..(i + 1) * half]);
                        part.extend_from_slice(&layer[(num_blocks + i) * half..(num_blocks + i + 1) * half]);
                    }
                    part
                })
                .collect();
            if let Err(e) = self.write_blocks(&block, None, &parts) {
                self.sched.pool_mut().release(&block);
                return Err(e);
            }
            self.sched.pool_mut().register(block[0], hash);
            self.sched.pool_mut().release(&block);
        }
        if !s.state.is_empty() {
            let Some(slot) = self.sched.snapshot_slot_for(parent) else {
                return Err("the prefix cache is off: a session with state has nowhere to go".into());
            };
            let n = layout.state_per_rank();
            let parts: Vec<Vec<u8>> = s.state.chunks(n.max(1)).map(|c| c.concat()).collect();
            self.write_blocks(&[], Some(slot), &parts)?;
        }
        self.publish();
        Ok(s.ids.len())
    }

    /// Writes each rank's part of `blocks` and `slot` ([`tf_models::Decoder::write_blocks`]).
    fn write_blocks(&mut self, blocks: &[u32], slot: Option<u32>, parts: &[Vec<u8>]) -> Result<(), String> {
        let bs = self.sched.pool().block_size();
        (self.model.decoder.write_blocks(&self.backend, &mut self.cache, bs, blocks, slot, parts))
            .map_err(|e| e.to_string())
    }
}
