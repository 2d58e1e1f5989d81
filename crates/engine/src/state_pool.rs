//! The state slot pool beside the KV block pool, for models with recurrent layers: every state
//! layer's pool has the same slots, laid out as live slots (one per running sequence), scratch
//! slots (one per live slot when drafting: the state before a verify round or an early-exit
//! draft, put back on a partial acceptance) and snapshot slots (the state at a cached block's
//! end, keyed by that block's chained hash, LRU-evicted when the pool is full or its block is
//! evicted). Pure bookkeeping: the engine copies the slots on the backend.

use std::collections::{BTreeMap, HashMap};

/// How many slots of each kind a model's state pools hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLayout {
    /// Live slots: the most sequences running at once.
    pub num_live: usize,
    /// Whether each live slot has a scratch slot (drafting is on).
    pub scratch: bool,
    /// Snapshot slots for the prefix cache.
    pub num_snapshots: usize,
}

impl StateLayout {
    /// The layout for `max_num_seqs` running sequences, with scratch slots when `drafting` and
    /// as many snapshot slots as live ones when `prefix_cache`.
    pub fn new(max_num_seqs: usize, drafting: bool, prefix_cache: bool) -> StateLayout {
        let num_live = max_num_seqs.max(1);
        StateLayout { num_live, scratch: drafting, num_snapshots: if prefix_cache { num_live } else { 0 } }
    }

    /// Slots in every state layer's pool.
    pub fn num_slots(&self) -> usize {
        self.num_live * (1 + usize::from(self.scratch)) + self.num_snapshots
    }

    /// The scratch slot paired with live slot `live`, when drafting.
    pub fn scratch_of(&self, live: u32) -> Option<u32> {
        self.scratch.then(|| live + self.num_live as u32)
    }

    /// The first snapshot slot.
    fn first_snapshot(&self) -> u32 {
        (self.num_live * (1 + usize::from(self.scratch))) as u32
    }
}

/// Which slots are taken: live ones by sequences, snapshot ones by block hashes.
#[derive(Debug)]
pub struct StatePool {
    layout: StateLayout,
    /// Free live slots (lowest handed out first).
    free_live: Vec<u32>,
    /// Free snapshot slots.
    free_snapshots: Vec<u32>,
    /// Snapshot slot and last-use stamp of each snapshotted block hash.
    snapshots: HashMap<u64, (u32, u64)>,
    /// Block hashes by last use (oldest first = next evicted).
    lru: BTreeMap<u64, u64>,
    clock: u64,
}

impl StatePool {
    /// A pool with every slot of `layout` free.
    pub fn new(layout: StateLayout) -> StatePool {
        let first = layout.first_snapshot();
        StatePool {
            layout,
            free_live: (0..layout.num_live as u32).rev().collect(),
            free_snapshots: (first..first + layout.num_snapshots as u32).rev().collect(),
            snapshots: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The layout.
    pub fn layout(&self) -> StateLayout {
        self.layout
    }

    /// Live slots free.
    pub fn num_free_live(&self) -> usize {
        self.free_live.len()
    }

    /// Snapshots held.
    pub fn num_snapshots(&self) -> usize {
        self.snapshots.len()
    }

    /// Takes a live slot for a sequence.
    pub fn take_live(&mut self) -> Option<u32> {
        self.free_live.pop()
    }

    /// Gives a sequence's live slot back.
    pub fn give_live(&mut self, slot: u32) {
        debug_assert!(!self.free_live.contains(&slot), "live slot {slot} freed twice");
        self.free_live.push(slot);
    }

    /// The snapshot slot holding the state at the end of the block hashed `hash`, marked used.
    pub fn snapshot(&mut self, hash: u64) -> Option<u32> {
        let (slot, stamp) = self.snapshots.get_mut(&hash)?;
        self.lru.remove(stamp);
        *stamp = self.clock;
        self.lru.insert(self.clock, hash);
        self.clock += 1;
        Some(*slot)
    }

    /// Whether a snapshot is held for `hash` (not marked used).
    pub fn has_snapshot(&self, hash: u64) -> bool {
        self.snapshots.contains_key(&hash)
    }

    /// A slot to write the snapshot for `hash` into (evicting the least recently used one when
    /// none is free); `None` when one is held already or there are no snapshot slots.
    pub fn new_snapshot(&mut self, hash: u64) -> Option<u32> {
        if self.snapshots.contains_key(&hash) {
            self.snapshot(hash);
            return None;
        }
        let slot = match self.free_snapshots.pop() {
            Some(s) => s,
            None => {
                let (_, oldest) = self.lru.pop_first()?;
                self.snapshots.remove(&oldest)?.0
            }
        };
        self.snapshots.insert(hash, (slot, self.clock));
        self.lru.insert(self.clock, hash);
        self.clock += 1;
        Some(slot)
    }

    /// Drops the snapshot for `hash` (its block was evicted), if any.
    pub fn drop_snapshot(&mut self, hash: u64) {
        if let Some((slot, stamp)) = self.snapshots.remove(&hash) {
            self.lru.remove(&stamp);
            self.free_snapshots.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_puts_scratch_after_live_and_snapshots_last() {
        let l = StateLayout::new(3, true, true);
        assert_eq!(l.num_slots(), 9);
        assert_eq!(l.scratch_of(2), Some(5));
        assert_eq!(l.first_snapshot(), 6);
        let plain = StateLayout::new(3, false, false);
        assert_eq!((plain.num_slots(), plain.scratch_of(0)), (3, None));
    }

    #[test]
    fn live_slots_run_out_and_come_back() {
        let mut p = StatePool::new(StateLayout::new(2, false, false));
        let (a, b) = (p.take_live(), p.take_live());
        assert_eq!((a, b), (Some(0), Some(1)));
        assert_eq!(p.take_live(), None, "two live slots only");
        p.give_live(0);
        assert_eq!(p.take_live(), Some(0));
    }

    #[test]
    fn snapshots_are_bounded_lru_and_dropped_with_their_block() {
        let mut p = StatePool::new(StateLayout::new(2, false, true));
        let s1 = p.new_snapshot(11).expect("free slot");
        let s2 = p.new_snapshot(22).expect("free slot");
        assert!((2..4).contains(&s1) && (2..4).contains(&s2) && s1 != s2);
        assert_eq!(p.new_snapshot(11), None, "held already");
        // 11 was used last: a third snapshot evicts 22 and takes its slot.
        assert_eq!(p.new_snapshot(33), Some(s2));
        assert!(!p.has_snapshot(22) && p.has_snapshot(11));
        assert_eq!(p.snapshot(11), Some(s1));
        p.drop_snapshot(11);
        assert_eq!(p.snapshot(11), None);
        assert_eq!(p.num_snapshots(), 1);
        assert_eq!(p.new_snapshot(44), Some(s1), "the dropped snapshot's slot is free again");
        let mut none = StatePool::new(StateLayout::new(2, false, false));
        assert_eq!(none.new_snapshot(1), None, "no snapshot slots without a prefix cache");
    }
}
