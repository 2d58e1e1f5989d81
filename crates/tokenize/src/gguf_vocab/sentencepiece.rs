//! SentencePiece vocabularies (`tokenizer.ggml.model` "llama" and "gemma4"): a BPE with byte
//! fallback over the `▁`-for-space alphabet, whose merges transformers recovers from the tokens
//! and their scores (`generate_merges`), with the space handling of its Llama, Phi-3 and Gemma
//! tokenizers.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashSet;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab as BpeVocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::split::Split;
use tokenizers::{DecoderWrapper, NormalizerWrapper, SplitDelimiterBehavior};

use super::{GgufVocab, Meta};
use crate::TokenizeError;

/// SentencePiece's stand-in for a space.
const SPACE: &str = "\u{2581}";

/// Which of transformers' SentencePiece pipelines a file gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Style {
    /// `LlamaTokenizer`: a `Metaspace` pre-tokenizer that puts `▁` before the text unless the
    /// file's `add_space_prefix` is false (transformers ignores the flag; llama.cpp honours it).
    Llama { prefix: bool },
    /// Phi-3: a normalizer that prepends `▁` (unless `add_space_prefix` is false) and replaces
    /// every space, so text that starts with a space gets two.
    Phi3 { prefix: bool },
    /// Gemma 1 to 3: spaces replaced, no prefix; runs of spaces the file spells with real spaces
    /// are respelled with `▁`, and merges follow the file's token order, not the scores.
    Gemma,
    /// Gemma 4 (kind "gemma4"): Gemma's pipeline with merges by score.
    Gemma4,
}

impl Style {
    /// The pipeline transformers picks by architecture for kind "llama".
    pub(super) fn for_llama_kind(arch: &str, add_space_prefix: Option<bool>) -> Style {
        let prefix = add_space_prefix.unwrap_or(true);
        match arch {
            "gemma" | "gemma2" | "gemma3" => Style::Gemma,
            "phi3" => Style::Phi3 { prefix },
            _ => Style::Llama { prefix },
        }
    }

    fn is_gemma(self) -> bool {
        matches!(self, Style::Gemma | Style::Gemma4)
    }
}

/// The model and pipeline, without added tokens or post-processor.
pub(super) fn build(meta: &Meta, file: &GgufVocab, style: Style) -> Result<tokenizers::Tokenizer, TokenizeError> {
    let tokens: Vec<Cow<str>> = match style {
        Style::Gemma => file.tokens.iter().map(|t| respell_spaces(t)).collect(),
        _ => file.tokens.iter().map(|t| Cow::Borrowed(t.as_str())).collect(),
    };
    let vocab = last_ids(&tokens);
    let merges = match (&file.merges, style) {
        (Some(merges), _) => merges.clone(),
        // Gemma's scores do not follow its merge order; its token order does.
        (None, Style::Gemma) => derive_merges(&tokens, &vocab, |id| -f64::from(id)),
        (None, _) => {
            let key = "tokenizer.ggml.scores";
            let scores = file.scores.as_ref().ok_or_else(|| meta.bad(key, "missing (merges are derived from them)"))?;
            derive_merges(&tokens, &vocab, |id| scores.get(id as usize).map_or(f64::NEG_INFINITY, |&s| f64::from(s)))
        }
    };
    let mut builder = BPE::builder().fuse_unk(true).byte_fallback(true);
    // Only transformers' Gemma class names an unknown token.
    if style.is_gemma() && vocab.contains_key("<unk>") {
        builder = builder.unk_token("<unk>".to_string());
    }
    let model = builder
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| meta.bad("tokenizer.ggml.tokens", &e.to_string()))?;

    let mut inner = tokenizers::Tokenizer::new(model);
    let regex_error = |e: tokenizers::Error| meta.bad("tokenizer.ggml.model", &e.to_string());
    let space_to_meta = Replace::new(" ", SPACE).map_err(regex_error)?;
    let meta_to_space = Replace::new(SPACE, " ").map_err(regex_error)?;
    let mut decoders = vec![DecoderWrapper::Replace(meta_to_space), ByteFallback::new().into(), Fuse::new().into()];
    match style {
        Style::Llama { prefix } => {
            let scheme = if prefix { PrependScheme::First } else { PrependScheme::Never };
            inner.with_pre_tokenizer(Some(Metaspace::new('\u{2581}', scheme, false)));
        }
        Style::Phi3 { prefix } => {
            let mut steps: Vec<NormalizerWrapper> = Vec::new();
            if prefix {
                steps.push(Prepend::new(SPACE.to_string()).into());
            }
            steps.push(space_to_meta.into());
            inner.with_normalizer(Some(NormalizerSequence::new(steps))).map_err(regex_error)?;
        }
        Style::Gemma | Style::Gemma4 => {
            inner.with_normalizer(Some(space_to_meta)).map_err(regex_error)?;
            let split = Split::new(" ", SplitDelimiterBehavior::MergedWithPrevious, false).map_err(regex_error)?;
            inner.with_pre_tokenizer(Some(split));
        }
    }
    if matches!(style, Style::Llama { prefix: true } | Style::Phi3 { prefix: true }) {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    inner.with_decoder(Some(DecoderSequence::new(decoders)));
    Ok(inner)
}

/// A token of only whitespace with at least one space is stored with real spaces by llama.cpp's
/// Gemma converter; the tokenizer sees `▁` (one per character, as transformers counts them).
fn respell_spaces(token: &str) -> Cow<'_, str> {
    let python_space = |c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c);
    if token.contains(' ') && token.chars().all(python_space) {
        Cow::Owned(SPACE.repeat(token.chars().count()))
    } else {
        Cow::Borrowed(token)
    }
}

/// Token to id; a token listed twice keeps its last id, as a Python dict does.
fn last_ids<S: AsRef<str>>(tokens: &[S]) -> BpeVocab {
    let mut ids = BpeVocab::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        ids.insert(token.as_ref().to_string(), id as u32);
    }
    ids
}

/// Token `index` cut at byte `at`, with what the merge order sorts by.
struct Cut {
    score: f64,
    index: u32,
    at: u32,
    left_chars: u32,
    right_chars: u32,
}

/// transformers' `generate_merges` with scores: every way to cut a token into two tokens of the
/// vocabulary, ordered by the score of the whole token (best first), then by the longer left
/// part, then the longer right part (in characters); ties keep the order of first appearance.
fn derive_merges<S: AsRef<str>>(tokens: &[S], ids: &BpeVocab, score: impl Fn(u32) -> f64) -> Vec<(String, String)> {
    let repeated = repeated_tokens(tokens, ids);
    let mut cuts = Vec::new();
    for (index, token) in tokens.iter().enumerate() {
        let token = token.as_ref();
        let Some(&id) = ids.get(token) else { continue };
        if repeated.get(index) == Some(&true) {
            continue;
        }
        // `+ 0.0` makes -0.0 equal to 0.0 under `total_cmp`, as Python compares them.
        let token_score = score(id) + 0.0;
        let num_chars = token.chars().count() as u32;
        for (left_chars, (at, _)) in (0u32..).zip(token.char_indices()).skip(1) {
            let (left, right) = token.split_at(at);
            if ids.contains_key(left) && ids.contains_key(right) {
                let right_chars = num_chars - left_chars;
                cuts.push(Cut { score: token_score, index: index as u32, at: at as u32, left_chars, right_chars });
            }
        }
    }
    // A stable sort on the reversed key keeps equal keys in order, as Python's `reverse=True` does.
    cuts.sort_by(|a, b| -> Ordering {
        b.score.total_cmp(&a.score).then(b.left_chars.cmp(&a.left_chars)).then(b.right_chars.cmp(&a.right_chars))
    });
    let split = |c: &Cut| tokens[c.index as usize].as_ref().split_at(c.at as usize);
    cuts.iter().map(split).map(|(l, r)| (l.to_string(), r.to_string())).collect()
}

/// Which tokens repeat an earlier one (empty when none does): only a first appearance is cut,
/// as a Python dict keeps a key where it was first inserted.
fn repeated_tokens<S: AsRef<str>>(tokens: &[S], ids: &BpeVocab) -> Vec<bool> {
    if ids.len() == tokens.len() {
        return Vec::new();
    }
    let mut seen = HashSet::with_capacity(ids.len());
    tokens.iter().map(|t| !seen.insert(t.as_ref())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(tokens: &[&str]) -> Vec<String> {
        tokens.iter().map(|t| t.to_string()).collect()
    }

    fn pairs(merges: &[(String, String)]) -> Vec<String> {
        merges.iter().map(|(a, b)| format!("{a} {b}")).collect()
    }

    #[test]
    fn merges_follow_score_then_longer_left_then_file_order() {
        let tokens = strings(&["a", "b", "c", "ab", "bc", "abc", "ca"]);
        let scores: [f64; 7] = [0.0, 0.0, 0.0, -2.0, -2.0, -1.0, -2.0];
        let ids = last_ids(&tokens);
        let merges = derive_merges(&tokens, &ids, |id| scores[id as usize]);
        // abc (-1) first, its longer left part first; then the -2 ties in file order.
        assert_eq!(pairs(&merges), ["ab c", "a bc", "a b", "b c", "c a"]);
        let by_position = derive_merges(&tokens, &ids, |id| -f64::from(id));
        assert_eq!(pairs(&by_position), ["a b", "b c", "ab c", "a bc", "c a"]);
    }

    #[test]
    fn merges_count_characters_not_bytes() {
        // "yz|w" has the longer left part in characters; "é|x" ties with it in bytes and would
        // come first by file order.
        let tokens = strings(&["é", "x", "y", "z", "w", "yz", "éx", "yzw"]);
        let ids = last_ids(&tokens);
        let merges = derive_merges(&tokens, &ids, |_| 0.0);
        assert_eq!(pairs(&merges), ["yz w", "y z", "é x"]);
    }

    #[test]
    fn duplicate_tokens_keep_first_place_and_last_id() {
        let tokens = strings(&["x", "y", "xy", "x"]);
        let ids = last_ids(&tokens);
        assert_eq!(ids.get("x"), Some(&3));
        let merges = derive_merges(&tokens, &ids, |id| -f64::from(id));
        assert_eq!(pairs(&merges), ["x y"]);
    }

    #[test]
    fn gemma_space_runs_are_respelled() {
        assert_eq!(respell_spaces("  "), "\u{2581}\u{2581}");
        assert_eq!(respell_spaces(" \t"), "\u{2581}\u{2581}");
        assert_eq!(respell_spaces("\t\t"), "\t\t");
        assert_eq!(respell_spaces(" a"), " a");
        assert_eq!(respell_spaces("\n"), "\n");
        assert_eq!(Style::for_llama_kind("gemma3", Some(true)), Style::Gemma);
        assert_eq!(Style::for_llama_kind("llama", None), Style::Llama { prefix: true });
        assert_eq!(Style::for_llama_kind("phi3", Some(false)), Style::Phi3 { prefix: false });
    }
}
