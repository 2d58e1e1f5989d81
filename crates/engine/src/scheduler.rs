//! Lane rounds (vLLM v1's design): each round maps every scheduled sequence to the number of
//! tokens it advances (a prefill chunk or one decode token) under a token budget. Decoding
//! sequences go first, then running sequences' prefill chunks, in admission order; waiting ones
//! are admitted while blocks and budget last; when blocks run out the latest-admitted sequence
//! is preempted and later recomputed (never one already in the round). At admission a
//! sequence takes whatever full blocks of its tokens the prefix cache holds.
//!
//! With per-sequence state (state_pool.rs) a sequence is admitted only when a live slot is free
//! too, and preemption frees both; a prefix hit goes only as deep as the deepest cached block
//! with a state snapshot, which is copied into the sequence's slot; a prefill chunk ends at the
//! last full-block boundary of the tokens to prefill, where the state is snapshotted; a verify
//! round's state is saved in the scratch slot first and put back on a partial acceptance, the
//! accepted tokens then fed again. The slot copies are queued for the engine
//! ([`Scheduler::take_state_copies`]). Pure bookkeeping: no device, no sampling.

use crate::block_pool::{BlockId, BlockPool};
use crate::state_pool::{StateLayout, StatePool};
use std::collections::{HashMap, VecDeque};

/// Identifies a sequence for its whole life.
pub type SeqId = u64;

/// A sequence's tokens and cache state.
#[derive(Debug, Clone)]
pub struct Sequence {
    /// Its id.
    pub id: SeqId,
    /// Prompt then generated tokens (checked or sampled ids).
    pub tokens: Vec<u32>,
    /// Length of the prompt part of `tokens`.
    pub prompt_len: usize,
    /// Tokens whose K/V are in the cache.
    pub num_computed: usize,
    /// Physical blocks holding the cached tokens, in order.
    pub block_table: Vec<BlockId>,
    /// Chained content hashes of the full blocks registered so far.
    pub block_hashes: Vec<u64>,
    /// Tokens found in the prefix cache at its (last) admission.
    pub cached_tokens: usize,
    /// Proposed continuation to verify in the next round (speculative decoding).
    pub draft: Vec<u32>,
    /// Its live state slot while it runs (models with state).
    pub state_slot: Option<u32>,
    /// Tokens computed at which its state is snapshotted (a full-block boundary; 0: none due).
    pub snapshot_at: usize,
    /// Admitted without the prefix cache: every prompt position is computed (prompt logprobs).
    pub uncached: bool,
}

/// Limits of a round.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    /// Sequences in flight at most.
    pub max_num_seqs: usize,
    /// Tokens advanced per round at most (all sequences together).
    pub max_round_tokens: usize,
    /// Largest prefill chunk of one sequence in one round.
    pub prefill_chunk: usize,
    /// Reuse cached full blocks of earlier sequences at admission.
    pub prefix_cache: bool,
}

/// One sequence's part of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundEntry {
    /// The sequence.
    pub seq: SeqId,
    /// First token position advanced (== tokens already cached).
    pub start: usize,
    /// Tokens advanced.
    pub num_tokens: usize,
    /// The round reaches the end of its tokens, so a next token is sampled.
    pub wants_logits: bool,
    /// Draft tokens fed after the last real token (their rows' logits verify them).
    pub draft: Vec<u32>,
}

/// The lane-round scheduler.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    pool: BlockPool,
    seqs: HashMap<SeqId, Sequence>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    num_preemptions: u64,
    hit_tokens: u64,
    query_tokens: u64,
    /// Slots of the model's state pools, when it has state.
    state: Option<StatePool>,
    /// State slot copies `(from, to)` to run before the next forward, in order.
    copies: Vec<(u32, u32)>,
}

impl Scheduler {
    /// A scheduler over `pool`.
    pub fn new(config: SchedulerConfig, pool: BlockPool) -> Scheduler {
        Scheduler {
            config,
            pool,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            num_preemptions: 0,
            hit_tokens: 0,
            query_tokens: 0,
            state: None,
            copies: Vec::new(),
        }
    }

    /// The scheduler for a model with per-sequence state in slots laid out as `layout`.
    pub fn with_state(mut self, layout: StateLayout) -> Scheduler {
        self.pool.track_evictions();
        self.state = Some(StatePool::new(layout));
        self
    }

    /// The state slots, when the model has state.
    pub fn state_pool(&self) -> Option<&StatePool> {
        self.state.as_ref()
    }

    /// The state slot copies `(from, to)` queued since the last call, to run in order before
    /// the next forward.
    pub fn take_state_copies(&mut self) -> Vec<(u32, u32)> {
        std::mem::take(&mut self.copies)
    }

    /// Queues a state slot copy (after those queued already).
    pub fn queue_state_copy(&mut self, from: u32, to: u32) {
        self.copies.push((from, to));
    }

    /// The snapshot slot for the state at the end of the cached block hashed `hash` (held or
    /// newly taken), to restore a saved session's state into.
    pub fn snapshot_slot_for(&mut self, hash: u64) -> Option<u32> {
        self.sync_evictions();
        let st = self.state.as_mut()?;
        st.new_snapshot(hash).or_else(|| st.snapshot(hash))
    }

    /// The block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The block pool, for restoring saved blocks into the prefix cache.
    pub fn pool_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    /// Sequences waiting for admission.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Sequences admitted.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Live state slots taken and in all (0, 0 for a model without state).
    pub fn state_use(&self) -> (usize, usize) {
        self.state.as_ref().map_or((0, 0), |st| {
            let total = st.layout().num_live;
            (total - st.num_free_live(), total)
        })
    }

    /// Preemptions so far.
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }

    /// Tokens served from the prefix cache at admission, and tokens admitted, so far.
    pub fn prefix_stats(&self) -> (u64, u64) {
        (self.hit_tokens, self.query_tokens)
    }

    /// Whether nothing is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The sequence `id`.
    pub fn seq(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Most tokens one sequence may ever hold (the whole pool).
    pub fn capacity_tokens(&self) -> usize {
        self.pool.num_blocks() * self.pool.block_size()
    }

    /// Queues a new sequence holding `prompt` (non-empty).
    pub fn add(&mut self, id: SeqId, prompt: Vec<u32>) {
        let prompt_len = prompt.len();
        self.seqs.insert(
            id,
            Sequence {
                id,
                tokens: prompt,
                prompt_len,
                num_computed: 0,
                block_table: Vec::new(),
                block_hashes: Vec::new(),
                cached_tokens: 0,
                draft: Vec::new(),
                state_slot: None,
                snapshot_at: 0,
                uncached: false,
            },
        );
        self.set_snapshot_at(id);
        self.waiting.push_back(id);
    }

    /// Makes sequence `id` skip the prefix cache at admission, so its whole prompt is computed.
    pub fn skip_prefix_cache(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.uncached = true;
        }
    }

    /// Plans the next round: decoding sequences first (one token each, with their drafts), then
    /// prefill chunks of running sequences in admission order, then admissions, while the token
    /// budget lasts; a prefill chunk never takes a decoding sequence's place.
    pub fn schedule(&mut self) -> Vec<RoundEntry> {
        self.sync_evictions();
        let mut budget = self.config.max_round_tokens;
        let mut plan = Vec::new();
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let n = if self.is_decoding(id) { self.want(id, budget) } else { 0 };
            if n == 0 {
                i += 1;
                continue;
            }
            if !self.reserve(id, n, i) {
                continue; // `id` itself was preempted; the same index now holds the next one
            }
            let e = self.entry(id, n);
            if !e.draft.is_empty() {
                self.save_state_before_verify(id);
            }
            plan.push(e);
            budget -= n;
            i += 1;
        }
        let prefilling: Vec<SeqId> = self.running.iter().copied().filter(|&id| !self.is_decoding(id)).collect();
        for id in prefilling {
            if budget == 0 {
                break;
            }
            if !self.running.contains(&id) {
                continue; // preempted to make room for an earlier chunk
            }
            let n = self.want(id, budget);
            if n == 0 || !self.reserve_unplanned(id, n, &plan) {
                continue;
            }
            plan.push(self.entry(id, n));
            budget -= n;
        }
        while budget > 0 && self.running.len() < self.config.max_num_seqs {
            let Some(&id) = self.waiting.front() else { break };
            if self.state.as_ref().is_some_and(|st| st.num_free_live() == 0) {
                break;
            }
            let restore = self.take_cached_prefix(id);
            let n = self.want(id, budget);
            if !self.grow(id, n) {
                self.drop_cached_prefix(id);
                break;
            }
            self.take_state_slot(id, restore);
            self.count_admission(id);
            self.waiting.pop_front();
            self.running.push(id);
            plan.push(self.entry(id, n));
            budget -= n;
        }
        plan
    }

    /// Records that the round's entries were computed (draft positions stay pending until
    /// accepted) and caches their newly full blocks.
    pub fn commit(&mut self, plan: &[RoundEntry]) {
        for e in plan {
            if let Some(s) = self.seqs.get_mut(&e.seq) {
                s.num_computed = e.start + e.num_tokens - e.draft.len();
            }
            self.register_full_blocks(e.seq);
            self.snapshot_if_due(e);
        }
    }

    /// Proposes `draft` to follow a decoding sequence's last token in the next round.
    pub fn set_draft(&mut self, id: SeqId, draft: Vec<u32>) {
        if let Some(s) = self.seqs.get_mut(&id)
            && s.tokens.len() == s.num_computed + 1
        {
            s.draft = draft;
        }
    }

    /// Gives a running sequence blocks for `tokens` positions without preempting anyone.
    pub fn ensure_blocks(&mut self, id: SeqId, tokens: usize) -> bool {
        let Some(s) = self.seqs.get(&id) else { return false };
        tokens <= s.num_computed || self.grow(id, tokens - s.num_computed)
    }

    /// Appends an accepted draft token, whose K/V the verify round already computed.
    pub fn accept(&mut self, id: SeqId, token: u32) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.tokens.push(token);
            s.num_computed += 1;
        }
    }

    /// Ends verify round `e`: drops the draft and the blocks that only rejected positions used.
    /// With state, when a draft token was rejected the state (after every fed token) is put
    /// back to the one before the round and the round's accepted tokens are fed again.
    pub fn end_draft(&mut self, e: &RoundEntry) {
        let id = e.seq;
        let keep = self.seqs.get(&id).map(|s| self.pool.blocks_for(s.num_computed));
        if let (Some(s), Some(keep)) = (self.seqs.get_mut(&id), keep) {
            s.draft.clear();
            if s.block_table.len() > keep {
                self.pool.release(&s.block_table[keep..]);
                s.block_table.truncate(keep);
            }
            if let (Some(st), Some(live)) = (&self.state, s.state_slot)
                && s.num_computed < e.start + e.num_tokens
            {
                // Without a scratch slot (not drafting: never), the state is recomputed whole.
                match st.layout().scratch_of(live) {
                    Some(scratch) => {
                        self.copies.push((scratch, live));
                        s.num_computed = e.start;
                    }
                    None => s.num_computed = 0,
                }
            }
        }
        self.register_full_blocks(id);
    }

    /// Queues the copy of `id`'s live state slot into its scratch slot (before a verify round
    /// or an early-exit draft advances it).
    pub fn save_state_before_verify(&mut self, id: SeqId) {
        let Some(live) = self.seqs.get(&id).and_then(|s| s.state_slot) else { return };
        if let Some(scratch) = self.state.as_ref().and_then(|st| st.layout().scratch_of(live)) {
            self.copies.push((live, scratch));
        }
    }

    /// Queues the copy of `id`'s scratch slot back over its live slot (after an early-exit
    /// draft advanced it).
    pub fn restore_state_after_draft(&mut self, id: SeqId) {
        let Some(live) = self.seqs.get(&id).and_then(|s| s.state_slot) else { return };
        if let Some(scratch) = self.state.as_ref().and_then(|st| st.layout().scratch_of(live)) {
            self.copies.push((scratch, live));
        }
    }

    /// Forgets the snapshots of blocks the pool evicted.
    fn sync_evictions(&mut self) {
        let Some(st) = self.state.as_mut() else { return };
        for h in self.pool.take_evicted() {
            st.drop_snapshot(h);
        }
    }

    /// Sets where a sequence about to be prefilled snapshots its state: the last full-block
    /// boundary of its tokens (with state and the prefix cache only).
    fn set_snapshot_at(&mut self, id: SeqId) {
        let bs = self.pool.block_size();
        let on = self.config.prefix_cache && self.state.is_some();
        if let Some(s) = self.seqs.get_mut(&id) {
            s.snapshot_at = if on { s.tokens.len() / bs * bs } else { 0 };
        }
    }

    /// Gives an admitted sequence a live slot, restoring the snapshot slot `restore` into it.
    fn take_state_slot(&mut self, id: SeqId, restore: Option<u32>) {
        let Some(st) = self.state.as_mut() else { return };
        let Some(s) = self.seqs.get_mut(&id) else { return };
        s.state_slot = st.take_live();
        if let (Some(from), Some(to)) = (restore, s.state_slot) {
            self.copies.push((from, to));
        }
    }

    /// Snapshots the state after a plain entry that ended at its sequence's snapshot boundary
    /// (a verify round's state is past it, so it only clears a passed boundary).
    fn snapshot_if_due(&mut self, e: &RoundEntry) {
        let bs = self.pool.block_size();
        let (Some(st), Some(s)) = (self.state.as_mut(), self.seqs.get_mut(&e.seq)) else { return };
        if s.snapshot_at == 0 || s.num_computed < s.snapshot_at {
            return;
        }
        let at = std::mem::take(&mut s.snapshot_at);
        let hash = s.block_hashes.get(at / bs - 1).copied();
        if e.draft.is_empty()
            && s.num_computed == at
            && let (Some(hash), Some(live)) = (hash, s.state_slot)
            && let Some(snap) = st.new_snapshot(hash)
        {
            self.copies.push((live, snap));
        }
    }

    fn register_full_blocks(&mut self, id: SeqId) {
        let bs = self.pool.block_size();
        let Some(s) = self.seqs.get_mut(&id) else { return };
        if !self.config.prefix_cache {
            return;
        }
        while s.block_hashes.len() < s.num_computed / bs {
            let i = s.block_hashes.len();
            let parent = s.block_hashes.last().copied().unwrap_or(0);
            let hash = self.pool.chain_hash(parent, &s.tokens[i * bs..(i + 1) * bs]);
            self.pool.register(s.block_table[i], hash);
            s.block_hashes.push(hash);
        }
    }

    /// Appends a sampled token to a sequence.
    pub fn append(&mut self, id: SeqId, token: u32) {
        if let Some(s) = self.seqs.get_mut(&id) {
            s.tokens.push(token);
        }
    }

    /// Removes a sequence (finished or cancelled) and frees its blocks and state slot.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        let s = self.seqs.remove(&id)?;
        self.pool.release(&s.block_table);
        if let (Some(st), Some(slot)) = (self.state.as_mut(), s.state_slot) {
            st.give_live(slot);
        }
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&w| w != id);
        Some(s)
    }

    /// Points a waiting sequence with nothing computed at the cached blocks of its longest
    /// cached prefix of full blocks, keeping at least its last token to compute; with state,
    /// only as far as the deepest of them with a snapshot, whose slot it returns.
    fn take_cached_prefix(&mut self, id: SeqId) -> Option<u32> {
        let bs = self.pool.block_size();
        let s = self.seqs.get_mut(&id)?;
        if !self.config.prefix_cache || s.uncached || s.num_computed > 0 || !s.block_table.is_empty() {
            return None;
        }
        let mut parent = 0;
        s.block_hashes.clear();
        for block in s.tokens[..s.tokens.len() - 1].chunks_exact(bs) {
            let hash = self.pool.chain_hash(parent, block);
            let Some(b) = self.pool.acquire_cached(hash) else { break };
            s.block_table.push(b);
            s.block_hashes.push(hash);
            parent = hash;
        }
        let mut restore = None;
        if let Some(st) = self.state.as_mut() {
            let keep = s.block_hashes.iter().rposition(|&h| st.has_snapshot(h)).map_or(0, |i| i + 1);
            self.pool.release(&s.block_table[keep..]);
            s.block_table.truncate(keep);
            s.block_hashes.truncate(keep);
            restore = s.block_hashes.last().and_then(|&h| st.snapshot(h));
        }
        s.num_computed = s.block_table.len() * bs;
        s.cached_tokens = s.num_computed;
        restore
    }

    /// Gives back the cached blocks a sequence took but could not be admitted with.
    fn drop_cached_prefix(&mut self, id: SeqId) {
        let Some(s) = self.seqs.get_mut(&id) else { return };
        self.pool.release(&s.block_table);
        s.block_table.clear();
        s.block_hashes.clear();
        s.num_computed = 0;
        s.cached_tokens = 0;
    }

    fn count_admission(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.get(&id) {
            self.hit_tokens += s.cached_tokens as u64;
            self.query_tokens += s.tokens.len() as u64;
        }
    }

    fn want(&self, id: SeqId, budget: usize) -> usize {
        let s = &self.seqs[&id];
        let left = s.tokens.len() - s.num_computed;
        if left == 1 {
            return budget.min(1 + s.draft.len());
        }
        let n = left.min(budget).min(self.config.prefill_chunk.max(1));
        match s.snapshot_at.checked_sub(s.num_computed) {
            Some(to_snapshot) if to_snapshot > 0 => n.min(to_snapshot),
            _ => n,
        }
    }

    fn entry(&self, id: SeqId, n: usize) -> RoundEntry {
        let s = &self.seqs[&id];
        let left = s.tokens.len() - s.num_computed;
        let draft = if left == 1 && n > 1 { s.draft[..n - 1].to_vec() } else { Vec::new() };
        let wants_logits = s.num_computed + n - draft.len() == s.tokens.len();
        RoundEntry { seq: id, start: s.num_computed, num_tokens: n, wants_logits, draft }
    }

    /// Makes room for `n` more tokens of running sequence `id` (at `index`), preempting from
    /// the back; false when `id` itself had to be preempted.
    fn reserve(&mut self, id: SeqId, n: usize, index: usize) -> bool {
        while !self.grow(id, n) {
            let Some(&victim) = self.running.last() else {
                return false;
            };
            self.preempt(victim);
            if victim == id {
                return false;
            }
            debug_assert!(self.running.len() > index);
        }
        true
    }

    /// Makes room for `n` more tokens of running sequence `id`, preempting from the back the
    /// sequences `plan` does not hold; false when `id` itself had to be preempted.
    fn reserve_unplanned(&mut self, id: SeqId, n: usize, plan: &[RoundEntry]) -> bool {
        while !self.grow(id, n) {
            let victim = self.running.iter().rev().copied().find(|&r| plan.iter().all(|e| e.seq != r));
            let Some(victim) = victim else { return false };
            self.preempt(victim);
            if victim == id {
                return false;
            }
        }
        true
    }

    /// Whether `id` has exactly its last token to compute (a decode row).
    fn is_decoding(&self, id: SeqId) -> bool {
        self.seqs.get(&id).is_some_and(|s| s.tokens.len() == s.num_computed + 1)
    }

    /// Extends `id`'s block table to hold `n` more tokens; false when the pool is short.
    fn grow(&mut self, id: SeqId, n: usize) -> bool {
        let s = &self.seqs[&id];
        let need = self.pool.blocks_for(s.num_computed + n).saturating_sub(s.block_table.len());
        match self.pool.allocate(need) {
            Some(blocks) => {
                if let Some(s) = self.seqs.get_mut(&id) {
                    s.block_table.extend(blocks);
                }
                true
            }
            None => false,
        }
    }

    fn preempt(&mut self, id: SeqId) {
        self.running.retain(|&r| r != id);
        if let Some(s) = self.seqs.get_mut(&id) {
            self.pool.release(&s.block_table);
            s.block_table.clear();
            s.block_hashes.clear();
            s.draft.clear();
            s.num_computed = 0;
            if let (Some(st), Some(slot)) = (self.state.as_mut(), s.state_slot.take()) {
                st.give_live(slot);
            }
        }
        self.set_snapshot_at(id);
        self.waiting.push_front(id);
        self.num_preemptions += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(blocks: usize, budget: usize, chunk: usize) -> Scheduler {
        let cfg =
            SchedulerConfig { max_num_seqs: 8, max_round_tokens: budget, prefill_chunk: chunk, prefix_cache: true };
        Scheduler::new(cfg, BlockPool::new(blocks, 4))
    }

    /// Runs rounds, appending token 7 whenever logits are wanted, until each seq has `total`.
    fn drive(s: &mut Scheduler, total: usize) -> Vec<Vec<RoundEntry>> {
        let mut rounds = Vec::new();
        for _ in 0..1000 {
            let plan = s.schedule();
            if plan.is_empty() {
                break;
            }
            s.commit(&plan);
            for e in &plan {
                if e.wants_logits {
                    s.append(e.seq, 7);
                    if s.seq(e.seq).unwrap().tokens.len() >= total {
                        s.remove(e.seq);
                    }
                }
            }
            rounds.push(plan);
        }
        rounds
    }

    #[test]
    fn prefill_is_chunked_then_decodes_one_token() {
        let mut s = sched(16, 64, 5);
        s.add(1, vec![1; 12]);
        let rounds = drive(&mut s, 14);
        let sizes: Vec<usize> = rounds.iter().map(|r| r[0].num_tokens).collect();
        assert_eq!(sizes, vec![5, 5, 2, 1]);
        assert!(rounds[2][0].wants_logits && !rounds[0][0].wants_logits);
        assert_eq!(s.pool().num_free(), 16, "blocks come back");
    }

    #[test]
    fn budget_is_shared_and_never_exceeded() {
        let mut s = sched(64, 8, 8);
        for id in 0..4 {
            s.add(id, vec![1; 6]);
        }
        for plan in drive(&mut s, 10) {
            assert!(plan.iter().map(|e| e.num_tokens).sum::<usize>() <= 8);
        }
        assert!(s.is_idle());
    }

    #[test]
    fn decode_rows_go_first_and_prefill_chunks_fill_the_rest_of_the_budget() {
        let mut s = sched(64, 6, 4);
        s.add(0, vec![1]);
        s.add(1, vec![1; 20]);
        s.add(2, vec![1]);
        let first = s.schedule();
        let sizes: Vec<(SeqId, usize)> = first.iter().map(|e| (e.seq, e.num_tokens)).collect();
        assert_eq!(sizes, vec![(0, 1), (1, 4), (2, 1)]);
        s.commit(&first);
        s.append(0, 7);
        s.append(2, 7);
        // Sequence 0 verifies three draft tokens: 4 of the 6 tokens; 2 decodes one; 1's chunk
        // (admitted before 2) gets what is left instead of taking 2's place.
        s.set_draft(0, vec![5, 5, 5]);
        let plan = s.schedule();
        let sizes: Vec<(SeqId, usize)> = plan.iter().map(|e| (e.seq, e.num_tokens)).collect();
        assert_eq!(sizes, vec![(0, 4), (2, 1), (1, 1)]);
        assert!(plan[1].wants_logits && !plan[2].wants_logits);
    }

    #[test]
    fn full_pool_preempts_and_everyone_finishes() {
        // 6 blocks of 4 tokens; three sequences growing to 12 tokens each cannot all fit.
        let mut s = sched(6, 64, 64);
        for id in 0..3 {
            s.add(id, vec![1; 5]);
        }
        let rounds = drive(&mut s, 12);
        assert!(s.is_idle(), "every sequence finished");
        assert!(s.num_preemptions() > 0, "the pool was too small without preemption");
        assert_eq!(s.pool().num_free(), 6);
        assert!(!rounds.is_empty());
    }

    #[test]
    fn a_shared_prefix_is_served_from_cache() {
        let mut s = sched(32, 64, 64);
        s.add(1, (0..13).collect());
        drive(&mut s, 14);
        // 13 prompt tokens + 1 generated: blocks [0..4), [4..8), [8..12) were full and cached.
        s.add(2, (0..10).chain([99, 98, 97]).collect());
        let plan = s.schedule();
        assert_eq!(plan[0].start, 8, "two full blocks of the shared 10-token prefix are reused");
        assert_eq!(s.seq(2).unwrap().cached_tokens, 8);
        // A prompt equal to a cached one still computes its last token.
        let mut t = sched(32, 64, 64);
        t.add(1, (0..8).collect());
        drive(&mut t, 9);
        t.add(2, (0..8).collect());
        assert_eq!(t.schedule()[0].start, 4);
        assert_eq!(t.prefix_stats(), (4, 16));
    }

    fn stateful(blocks: usize, budget: usize, chunk: usize, live: usize) -> Scheduler {
        sched(blocks, budget, chunk).with_state(StateLayout::new(live, true, true))
    }

    #[test]
    fn with_state_a_sequence_is_admitted_only_with_a_live_slot() {
        let mut s = stateful(64, 64, 64, 2);
        for id in 0..3 {
            s.add(id, vec![1; 3]);
        }
        let plan = s.schedule();
        assert_eq!(plan.len(), 2, "two live slots: the third waits");
        let slots: Vec<_> = (0..2).map(|id| s.seq(id).unwrap().state_slot).collect();
        assert_eq!(slots, vec![Some(0), Some(1)]);
        s.commit(&plan);
        s.remove(0);
        let plan = s.schedule();
        assert!(plan.iter().any(|e| e.seq == 2), "the freed slot admits the third");
        assert_eq!(s.seq(2).unwrap().state_slot, Some(0));
    }

    #[test]
    fn with_state_preemption_frees_the_slot_and_everyone_finishes() {
        let mut s = stateful(6, 64, 64, 3);
        for id in 0..3 {
            s.add(id, vec![1; 5]);
        }
        drive(&mut s, 12);
        assert!(s.is_idle() && s.num_preemptions() > 0);
        assert_eq!(s.state_pool().unwrap().num_free_live(), 3, "every slot came back");
    }

    #[test]
    fn with_state_a_prefill_chunk_ends_at_the_last_block_boundary_and_snapshots_there() {
        let mut s = stateful(32, 64, 64, 2);
        s.add(1, (0..10).collect());
        let plan = s.schedule();
        assert_eq!(plan[0].num_tokens, 8, "10 tokens in blocks of 4: the chunk stops at 8");
        s.commit(&plan);
        assert_eq!(s.take_state_copies(), vec![(0, 4)], "live slot 0 into the first snapshot slot");
        let plan = s.schedule();
        assert_eq!((plan[0].start, plan[0].num_tokens), (8, 2));
        s.commit(&plan);
        assert!(s.take_state_copies().is_empty());
        s.append(1, 7);
        s.remove(1);
        // A prompt sharing the first 9 tokens: blocks [0..4) and [4..8) are cached, and the
        // snapshot at 8 is restored into the new sequence's slot.
        s.add(2, (0..9).chain([50, 51, 52]).collect());
        let plan = s.schedule();
        assert_eq!(plan[0].start, 8);
        assert_eq!(s.take_state_copies(), vec![(4, 0)]);
        // A cached block without a snapshot at its end is not used: the hit stops at the
        // deepest one with a snapshot.
        let mut t = stateful(32, 64, 64, 2);
        t.add(1, (0..6).collect());
        drive(&mut t, 7);
        assert_eq!(t.take_state_copies(), vec![(0, 4)]);
        t.add(2, (0..12).collect());
        let plan = t.schedule();
        assert_eq!(plan[0].start, 4, "the snapshot at 4 (6 tokens' last boundary) serves the first block");
        t.commit(&plan);
        assert_eq!(t.take_state_copies(), vec![(4, 0), (0, 5)], "restored, then snapshotted at 12");
        t.add(3, (0..8).chain([60; 4]).collect());
        let plan = t.schedule();
        assert_eq!(plan.iter().find(|e| e.seq == 3).map(|e| e.start), Some(4), "block [4, 8) has no snapshot");
        assert_eq!(t.take_state_copies(), vec![(4, 1)]);
    }

    #[test]
    fn with_state_a_partly_rejected_draft_puts_the_state_back_and_feeds_again() {
        let mut s = stateful(32, 64, 64, 2);
        s.add(1, vec![1; 5]);
        drive_once(&mut s);
        drive_once(&mut s);
        s.take_state_copies();
        let start = s.seq(1).unwrap().num_computed;
        s.set_draft(1, vec![3, 4, 5]);
        let plan = s.schedule();
        assert_eq!(s.take_state_copies(), vec![(0, 2)], "live into scratch before the verify round");
        s.commit(&plan);
        s.accept(1, 3);
        s.append(1, 9);
        s.end_draft(&plan[0]);
        assert_eq!(s.take_state_copies(), vec![(2, 0)], "scratch back into live");
        assert_eq!(s.seq(1).unwrap().num_computed, start, "the fed tokens are fed again");
        let plan = s.schedule();
        assert_eq!((plan[0].start, plan[0].num_tokens, plan[0].wants_logits), (start, 3, true));
        // Every draft token accepted: the state after the round is the right one.
        s.commit(&plan);
        s.append(1, 7);
        s.set_draft(1, vec![3]);
        let plan = s.schedule();
        s.commit(&plan);
        s.accept(1, 3);
        s.append(1, 8);
        s.take_state_copies();
        s.end_draft(&plan[0]);
        assert!(s.take_state_copies().is_empty());
    }

    /// Runs one round, appending token 7 where logits are wanted.
    fn drive_once(s: &mut Scheduler) {
        let plan = s.schedule();
        s.commit(&plan);
        for e in plan.iter().filter(|e| e.wants_logits) {
            s.append(e.seq, 7);
        }
    }

    #[test]
    fn removal_frees_blocks_at_once() {
        let mut s = sched(8, 64, 64);
        s.add(1, vec![1; 9]);
        let plan = s.schedule();
        s.commit(&plan);
        assert_eq!(s.pool().num_used(), 3);
        s.remove(1);
        assert_eq!(s.pool().num_used(), 0);
    }
}
