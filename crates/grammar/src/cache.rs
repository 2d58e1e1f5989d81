//! A bounded least-recently-used map: at most `capacity` entries and `budget` bytes (each entry
//! weighed by its caller's estimate plus its key), the one used longest ago evicted first, so a
//! flood of unique or large keys cannot grow memory without bound.

use std::collections::HashMap;

/// The map.
pub(crate) struct Lru<V> {
    capacity: usize,
    budget: usize,
    bytes: usize,
    tick: u64,
    entries: HashMap<String, (V, u64, usize)>,
}

impl<V: Clone> Lru<V> {
    /// An empty map holding at most `capacity` entries (at least one) and `budget` bytes.
    pub(crate) fn new(capacity: usize, budget: usize) -> Lru<V> {
        Lru { capacity: capacity.max(1), budget, bytes: 0, tick: 0, entries: HashMap::new() }
    }

    /// The value of `key`, marked as used now.
    pub(crate) fn get(&mut self, key: &str) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, t, _)| {
            *t = tick;
            v.clone()
        })
    }

    /// Inserts `key` weighing `bytes` (plus the key's length), evicting the least recently used
    /// entries until both bounds hold; a value heavier than the whole budget is not kept.
    pub(crate) fn put(&mut self, key: String, value: V, bytes: usize) {
        self.tick += 1;
        let weight = bytes.saturating_add(key.len());
        if let Some((_, _, old)) = self.entries.remove(&key) {
            self.bytes -= old;
        }
        if weight > self.budget {
            return;
        }
        while self.entries.len() >= self.capacity || self.bytes + weight > self.budget {
            let Some(old) = self.entries.iter().min_by_key(|(_, (_, t, _))| *t).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some((_, _, w)) = self.entries.remove(&old) {
                self.bytes -= w;
            }
        }
        self.bytes += weight;
        self.entries.insert(key, (value, self.tick, weight));
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes held, as estimated when the entries were put.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_goes_first_and_the_size_stays_bounded() {
        let mut c = Lru::new(2, usize::MAX);
        c.put("a".into(), 1, 0);
        c.put("b".into(), 2, 0);
        assert_eq!(c.get("a"), Some(1));
        c.put("c".into(), 3, 0);
        assert_eq!(c.get("b"), None, "b was used longest ago");
        assert_eq!((c.get("a"), c.get("c")), (Some(1), Some(3)));
        for i in 0..100 {
            c.put(format!("k{i}"), i, 0);
        }
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn the_byte_budget_evicts_the_least_recently_used_and_counts_keys() {
        let mut c = Lru::new(100, 1000);
        c.put("a".into(), 1, 399);
        c.put("b".into(), 2, 399);
        assert_eq!(c.bytes(), 800);
        assert_eq!(c.get("a"), Some(1));
        c.put("c".into(), 3, 399);
        assert_eq!((c.get("a"), c.get("b"), c.get("c")), (Some(1), None, Some(3)), "b was used longest ago");
        assert_eq!(c.bytes(), 800);
        c.put("a".into(), 4, 99);
        assert_eq!(c.bytes(), 500, "a replaced is weighed once");
        c.put("huge".into(), 5, 2000);
        assert_eq!((c.get("huge"), c.len()), (None, 2), "heavier than the budget: not kept, nothing evicted");
        for i in 0..50 {
            c.put(format!("k{i}"), i, 190);
        }
        assert!(c.bytes() <= 1000 && c.len() == 5, "{} bytes in {} entries", c.bytes(), c.len());
    }
}
