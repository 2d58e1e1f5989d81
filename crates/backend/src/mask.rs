//! A row's allowed-token mask (structured output): a bitset over ids, shared between the rows
//! of one round without copying. Ids outside the mask take -inf before any other edit.

use std::sync::Arc;

/// The ids a row may sample: bit `id % 32` of word `id / 32` set means allowed; ids past the
/// words are not allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Arc<[u32]>,
}

impl TokenMask {
    /// A mask from its bitset words.
    pub fn from_words(words: impl Into<Arc<[u32]>>) -> TokenMask {
        TokenMask { words: words.into() }
    }

    /// A mask allowing exactly `ids` in a vocabulary `width` ids wide (ids at or past it are dropped).
    pub fn from_ids(width: usize, ids: impl IntoIterator<Item = u32>) -> TokenMask {
        let mut words = vec![0u32; width.div_ceil(32)];
        for id in ids.into_iter().filter(|&i| (i as usize) < width) {
            words[id as usize / 32] |= 1 << (id % 32);
        }
        TokenMask::from_words(words)
    }

    /// The bitset words.
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Whether `id` is allowed.
    #[inline]
    pub fn allows(&self, id: u32) -> bool {
        self.words.get(id as usize / 32).is_some_and(|w| w >> (id % 32) & 1 == 1)
    }

    /// Sets every id of `row` the mask does not allow to -inf.
    pub fn apply(&self, row: &mut [f32]) {
        for (i, chunk) in row.chunks_mut(32).enumerate() {
            let w = self.words.get(i).copied().unwrap_or(0);
            if w == u32::MAX {
                continue;
            }
            for (b, x) in chunk.iter_mut().enumerate() {
                if w >> b & 1 == 0 {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// The number of allowed ids.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_outside_the_mask_become_minus_infinity_and_the_rest_stay() {
        let m = TokenMask::from_ids(70, [1, 33, 69, 500]);
        assert!(m.allows(1) && m.allows(33) && m.allows(69));
        assert!(!m.allows(0) && !m.allows(500) && !m.allows(10_000));
        assert_eq!(m.count(), 3);
        let mut row: Vec<f32> = (0..70).map(|i| i as f32).collect();
        m.apply(&mut row);
        for (i, &x) in row.iter().enumerate() {
            let want = if [1, 33, 69].contains(&i) { i as f32 } else { f32::NEG_INFINITY };
            assert_eq!(x, want, "id {i}");
        }
    }
}
