//! The engine thread's side of saved sessions: a save runs the ids as a prefill-only sequence
//! (reusing cached blocks) and writes its blocks (and its state slots, after the last token) when
//! the last one is computed; a restore puts an already-checked session's blocks into the prefix
//! cache, block by block, and its state into the snapshot slot of its last block.

use super::Core;
use crate::session::{self, CheckedSession};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use tf_backend::Backend;
use tf_core::TokenIds;

/// Why a tensor-parallel engine saves and restores no session: each rank holds its heads' K/V.
const TP_SESSIONS: &str =
    "sessions are not saved or restored under --tensor-parallel-size > 1 yet (each rank holds its own heads' KV)";

/// A save waiting for its sequence's K/V to be computed.
pub(super) struct PendingSave {
    pub(super) path: PathBuf,
    pub(super) reply: Sender<Result<usize, String>>,
}

impl<B: Backend> Core<B> {
    pub(super) fn admit_save(&mut self, ids: TokenIds, path: PathBuf, reply: Sender<Result<usize, String>>) {
        if self.model.decoder.tp_size() > 1 {
            let _ = reply.send(Err(TP_SESSIONS.into()));
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
            Some(seq) => {
                let layers = self.cache.kv.iter().map(|kv| self.backend.read_kv_blocks(kv, &seq.block_table)).collect();
                let slot = seq.state_slot.unwrap_or(0);
                let state = self.cache.state.iter().map(|st| self.backend.read_state(st, &[slot])).collect();
                let checked = self.model.vocab.check_u32(&seq.tokens).map_err(|e| e.to_string());
                checked.and_then(|ids| {
                    let s = CheckedSession { ids, layers, state };
                    let layout = self.session_layout();
                    session::write(&save.path, &layout, &s).map(|_| s.ids.len()).map_err(|e| e.to_string())
                })
            }
            None => Err("the session's sequence vanished".into()),
        };
        self.sched.remove(id);
        let _ = save.reply.send(result);
    }

    /// Puts each block of `s` not already cached into a fresh pool block and caches it.
    pub(super) fn restore(&mut self, s: &CheckedSession) -> Result<usize, String> {
        if self.model.decoder.tp_size() > 1 {
            return Err(TP_SESSIONS.into());
        }
        let layout = self.session_layout();
        let bs = layout.block_size;
        let num_blocks = s.ids.len() / bs;
        if s.state.len() != self.cache.state.len() {
            return Err(format!(
                "the session has {} state layers, the model {}",
                s.state.len(),
                self.cache.state.len()
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
            for ((kv, layer), l) in self.cache.kv.iter_mut().zip(&s.layers).zip(0..) {
                let half = layout.half_block_bytes(l);
                let k = &layer[i * half..(i + 1) * half];
                let v = &layer[(num_blocks + i) * half..(num_blocks + i + 1) * half];
                self.backend.write_kv_blocks(kv, &block, &[k, v].concat());
            }
            self.sched.pool_mut().register(block[0], hash);
            self.sched.pool_mut().release(&block);
        }
        if !s.state.is_empty() {
            let Some(slot) = self.sched.snapshot_slot_for(parent) else {
                return Err("the prefix cache is off: a session with state has nowhere to go".into());
            };
            for (st, bytes) in self.cache.state.iter_mut().zip(&s.state) {
                self.backend.write_state(st, &[slot], bytes);
            }
        }
        self.publish();
        Ok(s.ids.len())
    }

    fn session_layout(&self) -> session::SessionLayout {
        let block_size = self.sched.pool().block_size();
        session::SessionLayout::of(&self.model, self.backend.kv_dtype(), block_size, self.max_seq_tokens)
    }
}
