//! The trust boundary for token ids (docs/architecture.md, "the trust boundary").
//!
//! Ids from outside are raw `i64`s; the only way to turn them into [`TokenIds`] is
//! [`Vocab::check`], which compares each against the embedding table's row count. Ids the
//! engine makes itself (sampled, drafted) index a logits row of exactly that width, so
//! [`Vocab::sampled`] only carries a `debug_assert!`.

use thiserror::Error;

/// The vocabulary as loaded: the number of rows of the embedding table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vocab {
    rows: u32,
}

/// A token id that was outside `0..rows`.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("token id {id} at index {index} is outside the vocabulary (0..{rows})")]
pub struct BadToken {
    /// The offending value as received.
    pub id: i64,
    /// Its index in the input list.
    pub index: usize,
    /// The embedding table's row count.
    pub rows: u32,
}

/// A sequence of token ids, each known to be below the embedding table's row count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokenIds(Vec<u32>);

impl Vocab {
    /// A vocabulary of `rows` embedding rows; `None` when zero or past `u32`.
    pub fn new(rows: usize) -> Option<Vocab> {
        let rows = u32::try_from(rows).ok()?;
        (rows > 0).then_some(Vocab { rows })
    }

    /// Number of rows in the embedding table.
    pub fn rows(self) -> usize {
        self.rows as usize
    }

    /// Checks raw ids from outside; the one way into [`TokenIds`].
    pub fn check(self, raw: &[i64]) -> Result<TokenIds, BadToken> {
        let mut ids = Vec::with_capacity(raw.len());
        for (index, &id) in raw.iter().enumerate() {
            if id < 0 || id >= i64::from(self.rows) {
                return Err(BadToken { id, index, rows: self.rows });
            }
            ids.push(id as u32);
        }
        Ok(TokenIds(ids))
    }

    /// Checks a single raw id from outside.
    pub fn check_one(self, id: i64) -> Result<u32, BadToken> {
        self.check(&[id]).map(|t| t.0[0])
    }

    /// Checks unsigned ids (from a tokenizer validated at load, or a file).
    pub fn check_u32(self, raw: &[u32]) -> Result<TokenIds, BadToken> {
        match raw.iter().position(|&id| id >= self.rows) {
            Some(index) => Err(BadToken { id: i64::from(raw[index]), index, rows: self.rows }),
            None => Ok(TokenIds(raw.to_vec())),
        }
    }

    /// An id the engine produced by indexing a logits row of width `rows` (in range by construction).
    #[inline]
    pub fn sampled(self, index: usize) -> u32 {
        debug_assert!(index < self.rows as usize, "sampled index past the vocabulary");
        index as u32
    }
}

impl TokenIds {
    /// An empty sequence.
    pub fn new() -> TokenIds {
        TokenIds(Vec::new())
    }

    /// The ids as a slice.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }

    /// Number of ids.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no ids.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends an id produced by [`Vocab::sampled`].
    pub fn push_sampled(&mut self, id: u32) {
        self.0.push(id);
    }

    /// Appends all ids of another checked sequence.
    pub fn extend_from(&mut self, other: &TokenIds) {
        self.0.extend_from_slice(&other.0);
    }

    /// Keeps the first `len` ids.
    pub fn truncate(&mut self, len: usize) {
        self.0.truncate(len);
    }

    /// Keeps the last `len` ids (all of them where there are fewer).
    pub fn keep_last(&mut self, len: usize) {
        let cut = self.0.len().saturating_sub(len);
        self.0.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_last_keeps_the_tail() {
        let v = Vocab::new(512).unwrap();
        let mut ids = v.check(&[5, 6, 7, 8]).unwrap();
        ids.keep_last(9);
        assert_eq!(ids.as_slice(), &[5, 6, 7, 8]);
        ids.keep_last(2);
        assert_eq!(ids.as_slice(), &[7, 8]);
    }

    #[test]
    fn ids_below_rows_pass() {
        let v = Vocab::new(512).unwrap();
        let ids = v.check(&[0, 1, 511]).unwrap();
        assert_eq!(ids.as_slice(), &[0, 1, 511]);
    }

    #[test]
    fn id_equal_to_rows_is_refused() {
        let v = Vocab::new(512).unwrap();
        let err = v.check(&[3, 512]).unwrap_err();
        assert_eq!(err, BadToken { id: 512, index: 1, rows: 512 });
    }

    #[test]
    fn negative_and_huge_ids_are_refused() {
        let v = Vocab::new(512).unwrap();
        for bad in [-1, 513, 1 << 32, i64::MAX, i64::MIN] {
            assert!(v.check(&[bad]).is_err(), "{bad} got in");
        }
        assert!(v.check_u32(&[u32::MAX]).is_err());
        assert!(v.check_one(-5).is_err());
    }

    #[test]
    fn zero_rows_is_no_vocab() {
        assert!(Vocab::new(0).is_none());
        assert!(Vocab::new(usize::MAX).is_none());
    }
}
