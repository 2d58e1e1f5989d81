//! Drafters for speculative decoding: each proposes tokens likely to follow a sequence, and the
//! target verifies them in an ordinary round. A draft token is kept iff it equals the token the
//! target would have sampled there anyway (greedy or seeded Gumbel-max keyed by position), so
//! drafting changes speed, never output. Exactness costs acceptance against rejection sampling,
//! which could accept a token plain decoding would not have produced.

/// Proposes continuations of sequences.
pub trait Drafter: Send {
    /// Up to `k` tokens likely to follow `tokens` (ids below the target's rows).
    fn propose(&mut self, tokens: &[u32], k: usize) -> Vec<u32>;
    /// Short name for logs and metrics.
    fn name(&self) -> &'static str;
}

/// Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens (longest n
/// first) and propose what followed it. No weights; strong on edits, RAG and summaries.
#[derive(Debug, Clone, Copy)]
pub struct NgramDrafter {
    /// Longest suffix to match.
    pub max_n: usize,
    /// Shortest suffix to match.
    pub min_n: usize,
    /// How far back to search (tokens), bounding the cost per round.
    pub window: usize,
}

impl Default for NgramDrafter {
    fn default() -> NgramDrafter {
        NgramDrafter { max_n: 4, min_n: 2, window: 8192 }
    }
}

impl Drafter for NgramDrafter {
    fn propose(&mut self, tokens: &[u32], k: usize) -> Vec<u32> {
        let len = tokens.len();
        let lo = len.saturating_sub(self.window);
        for n in (self.min_n.max(1)..=self.max_n).rev() {
            if len <= n {
                continue;
            }
            let suffix = &tokens[len - n..];
            // Latest start p < len - n whose n tokens equal the suffix.
            let found = (lo..len - n).rev().find(|&p| &tokens[p..p + n] == suffix);
            if let Some(p) = found {
                let from = p + n;
                return tokens[from..(from + k).min(len)].to_vec();
            }
        }
        Vec::new()
    }

    fn name(&self) -> &'static str {
        "ngram"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_match() {
        let mut d = NgramDrafter::default();
        let t = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3];
        assert_eq!(d.propose(&t, 2), vec![7, 8], "latest occurrence of [1,2,3] wins");
        assert_eq!(d.propose(&t, 10), vec![7, 8, 5, 1, 2, 3]);
        assert!(d.propose(&[4, 5, 6], 3).is_empty());
        assert!(d.propose(&[], 3).is_empty());
    }

    #[test]
    fn longest_suffix_first() {
        let mut d = NgramDrafter { max_n: 3, min_n: 1, window: 100 };
        // [2,3] occurs twice; the 3-gram [1,2,3] only once, followed by 4.
        let t = [1, 2, 3, 4, 0, 2, 3, 5, 1, 2, 3];
        assert_eq!(d.propose(&t, 1), vec![4]);
    }
}
