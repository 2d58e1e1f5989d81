//! A bounded least-recently-used map: at most `capacity` entries, the one used longest ago
//! evicted first, so a flood of unique keys cannot grow memory without bound.

use std::collections::HashMap;

/// The map.
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<String, (V, u64)>,
}

impl<V: Clone> Lru<V> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Lru<V> {
        Lru { capacity: capacity.max(1), tick: 0, entries: HashMap::new() }
    }

    /// The value of `key`, marked as used now.
    pub(crate) fn get(&mut self, key: &str) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, t)| {
            *t = tick;
            v.clone()
        })
    }

    /// Inserts `key`, evicting the least recently used entry when full.
    pub(crate) fn put(&mut self, key: String, value: V) {
        self.tick += 1;
        if !self.entries.contains_key(&key)
            && self.entries.len() >= self.capacity
            && let Some(old) = self.entries.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| k.clone())
        {
            self.entries.remove(&old);
        }
        self.entries.insert(key, (value, self.tick));
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_goes_first_and_the_size_stays_bounded() {
        let mut c = Lru::new(2);
        c.put("a".into(), 1);
        c.put("b".into(), 2);
        assert_eq!(c.get("a"), Some(1));
        c.put("c".into(), 3);
        assert_eq!(c.get("b"), None, "b was used longest ago");
        assert_eq!((c.get("a"), c.get("c")), (Some(1), Some(3)));
        for i in 0..100 {
            c.put(format!("k{i}"), i);
        }
        assert_eq!(c.len(), 2);
    }
}
