//! Lane rounds (vLLM v1's design): each round maps every scheduled sequence to the number of
//! tokens it advances (a prefill chunk or one decode token) under a token budget. Decoding
//! sequences go first, then running sequences' prefill chunks, in admission order; waiting ones
//! are admitted while blocks and budget last; when blocks run out the latest-admitted sequence
//! is preempted and later recomputed (never one already in the round). At admission a
//! sequence takes whatever full blocks of its tokens the prefix cache holds.
//! Pure bookkeeping: no device, no sampling.

use crate::block_pool::{BlockId, BlockPool};
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
        }
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
            },
        );
        self.waiting.push_back(id);
    }

    /// Plans the next round: decoding sequences first (one token each, with their drafts), then
    /// prefill chunks of running sequences in admission order, then admissions, while the token
    /// budget lasts; a prefill chunk never takes a decoding sequence's place.
    pub fn schedule(&mut self) -> Vec<RoundEntry> {
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
            plan.push(self.entry(id, n));
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
            self.take_cached_prefix(id);
            let n = self.want(id, budget);
            if !self.grow(id, n) {
                self.drop_cached_prefix(id);
                break;
            }
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

    /// Ends a verify round: drops the draft and the blocks that only rejected positions used.
    pub fn end_draft(&mut self, id: SeqId) {
        let keep = self.seqs.get(&id).map(|s| self.pool.blocks_for(s.num_computed));
        if let (Some(s), Some(keep)) = (self.seqs.get_mut(&id), keep) {
            s.draft.clear();
            if s.block_table.len() > keep {
                self.pool.release(&s.block_table[keep..]);
                s.block_table.truncate(keep);
            }
        }
        self.register_full_blocks(id);
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

    /// Removes a sequence (finished or cancelled) and frees its blocks.
    pub fn remove(&mut self, id: SeqId) -> Option<Sequence> {
        let s = self.seqs.remove(&id)?;
        self.pool.release(&s.block_table);
        self.running.retain(|&r| r != id);
        self.waiting.retain(|&w| w != id);
        Some(s)
    }

    /// Points a waiting sequence with nothing computed at the cached blocks of its longest
    /// cached prefix of full blocks, keeping at least its last token to compute.
    fn take_cached_prefix(&mut self, id: SeqId) {
        let bs = self.pool.block_size();
        let Some(s) = self.seqs.get_mut(&id) else { return };
        if !self.config.prefix_cache || s.num_computed > 0 || !s.block_table.is_empty() {
            return;
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
        s.num_computed = s.block_table.len() * bs;
        s.cached_tokens = s.num_computed;
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
        left.min(budget).min(self.config.prefill_chunk.max(1))
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
        }
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
