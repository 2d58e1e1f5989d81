//! One sequence's place in its grammar: the next token's mask, and the tokens taken (with
//! rollback, so drafted tokens can be tried and undone).

use llguidance::Matcher;

/// A sequence's matcher.
pub struct SeqMatcher {
    m: Matcher,
    words: usize,
}

impl SeqMatcher {
    pub(crate) fn new(m: Matcher, width: usize) -> SeqMatcher {
        SeqMatcher { m, words: width.div_ceil(32) }
    }

    /// The ids allowed next as bitset words (bit `id % 32` of word `id / 32`); only the end of
    /// sequence once the grammar is finished.
    pub fn mask(&mut self) -> Result<Vec<u32>, String> {
        let v = self.m.compute_mask_or_eos().map_err(|e| e.to_string())?;
        let mut words = v.as_slice().to_vec();
        words.resize(self.words, 0);
        Ok(words)
    }

    /// Takes `token`; false (and the matcher stays where it was) when the grammar refuses it.
    pub fn accept(&mut self, token: u32) -> bool {
        matches!(self.m.try_consume_tokens(&[token]), Ok(1))
    }

    /// Undoes the last `n` tokens taken.
    pub fn rollback(&mut self, n: usize) -> bool {
        self.m.rollback(n).is_ok()
    }

    /// Whether the grammar is finished (or failed): nothing but the end may follow.
    pub fn is_stopped(&self) -> bool {
        self.m.is_stopped()
    }
}
