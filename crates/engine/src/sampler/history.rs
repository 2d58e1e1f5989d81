//! The ids a sequence has seen, kept in the form the penalties read: the distinct prompt ids
//! and per-id counts of generated ids, updated in O(1) per token.

use std::collections::{HashMap, HashSet};

use tf_core::TokenIds;

/// Prompt and generated ids of one sequence, for repetition, presence and frequency penalties.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Each prompt id once, in first-seen order.
    prompt_distinct: Vec<u32>,
    /// The same ids, for membership.
    prompt_seen: HashSet<u32>,
    /// Generated ids in order.
    generated: Vec<u32>,
    /// How often each generated id occurs (ids with count 0 are absent).
    counts: HashMap<u32, u32>,
}

impl History {
    /// The history of a sequence that has generated nothing yet.
    pub fn new(prompt: &TokenIds) -> History {
        let mut history = History::default();
        for &id in prompt.as_slice() {
            if history.prompt_seen.insert(id) {
                history.prompt_distinct.push(id);
            }
        }
        history
    }

    /// Records a generated id.
    pub fn push(&mut self, id: u32) {
        self.generated.push(id);
        *self.counts.entry(id).or_insert(0) += 1;
    }

    /// Forgets the last generated id (a rejected draft), returning it.
    pub fn pop(&mut self) -> Option<u32> {
        let id = self.generated.pop()?;
        if let Some(count) = self.counts.get_mut(&id) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(&id);
            }
        }
        Some(id)
    }

    /// Keeps the first `len` generated ids.
    pub fn truncate_generated(&mut self, len: usize) {
        while self.generated.len() > len {
            self.pop();
        }
    }

    /// The generated ids in order.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// How often `id` was generated.
    pub fn count(&self, id: u32) -> u32 {
        self.counts.get(&id).copied().unwrap_or(0)
    }

    /// Each id of prompt or output once (what the repetition penalty touches).
    pub fn seen_ids(&self) -> impl Iterator<Item = u32> + '_ {
        let new_in_output = self.counts.keys().filter(|id| !self.prompt_seen.contains(id));
        self.prompt_distinct.iter().chain(new_in_output).copied()
    }

    /// Each generated id once with its count (what presence and frequency penalties touch).
    pub fn generated_counts(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.counts.iter().map(|(&id, &count)| (id, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::Vocab;

    #[test]
    fn counts_follow_push_and_pop() {
        let prompt = Vocab::new(100).unwrap().check(&[5, 6, 5, 7]).unwrap();
        let mut h = History::new(&prompt);
        for id in [6, 9, 9, 9] {
            h.push(id);
        }
        assert_eq!((h.count(9), h.count(6), h.count(5)), (3, 1, 0));
        let mut seen: Vec<u32> = h.seen_ids().collect();
        seen.sort();
        assert_eq!(seen, [5, 6, 7, 9]);
        h.truncate_generated(2);
        assert_eq!(h.generated(), &[6, 9]);
        assert_eq!(h.count(9), 1);
        assert_eq!(h.pop(), Some(9));
        assert_eq!(h.count(9), 0);
        assert_eq!(h.generated_counts().collect::<Vec<_>>(), [(6, 1)]);
        let mut seen: Vec<u32> = h.seen_ids().collect();
        seen.sort();
        assert_eq!(seen, [5, 6, 7]);
    }
}
