//! Streaming detokenization with the prefix-offset / read-offset window of vLLM and HF's
//! `TextStreamer`: a piece is emitted only once it no longer ends in an incomplete character.

use crate::{TokenizeError, Tokenizer};

/// How many trailing context ids seed the window, so a first generated token that starts a
/// word keeps its leading space (vLLM's `INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET`).
const CONTEXT_IDS: usize = 5;

/// The replacement character a decoder writes for bytes that do not form a whole character yet.
const REPLACEMENT: char = '\u{FFFD}';

/// Turns ids fed one at a time into text pieces whose concatenation is the decoded text.
#[derive(Clone, Debug)]
pub struct IncrementalDecoder {
    /// The ids of the window: those before `prefix_offset` have been dropped.
    ids: Vec<u32>,
    /// Start of the ids decoded for context only.
    prefix_offset: usize,
    /// End of the ids whose text has been emitted.
    read_offset: usize,
    skip_special_tokens: bool,
}

impl IncrementalDecoder {
    /// A decoder whose output continues `context` (e.g. the prompt ids; may be empty).
    pub fn new(context: &[u32], skip_special_tokens: bool) -> IncrementalDecoder {
        let ids = context[context.len().saturating_sub(CONTEXT_IDS)..].to_vec();
        let read_offset = ids.len();
        IncrementalDecoder { ids, prefix_offset: 0, read_offset, skip_special_tokens }
    }

    /// Feeds one id; returns the text it completes (empty while a character is still partial).
    pub fn step(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, TokenizeError> {
        self.ids.push(id);
        let (prefix_text, new_text) = self.window_texts(tokenizer)?;
        if new_text.len() <= prefix_text.len() || new_text.ends_with(REPLACEMENT) {
            return Ok(String::new());
        }
        let piece = suffix_after(&new_text, &prefix_text);
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.ids.drain(..self.prefix_offset);
        self.read_offset -= self.prefix_offset;
        self.prefix_offset = 0;
        Ok(piece)
    }

    /// Emits whatever is still held back (an incomplete character decodes as U+FFFD).
    pub fn finish(&mut self, tokenizer: &Tokenizer) -> Result<String, TokenizeError> {
        if self.read_offset == self.ids.len() {
            return Ok(String::new());
        }
        let (prefix_text, new_text) = self.window_texts(tokenizer)?;
        let piece =
            if new_text.len() > prefix_text.len() { suffix_after(&new_text, &prefix_text) } else { String::new() };
        // Everything is emitted now; keep a context tail in case more ids follow.
        self.ids.drain(..self.ids.len().saturating_sub(CONTEXT_IDS));
        self.prefix_offset = 0;
        self.read_offset = self.ids.len();
        Ok(piece)
    }

    /// The text of the context part of the window and of the whole window.
    fn window_texts(&self, tokenizer: &Tokenizer) -> Result<(String, String), TokenizeError> {
        let prefix = &self.ids[self.prefix_offset..self.read_offset];
        let prefix_text = tokenizer.decode(prefix, self.skip_special_tokens)?;
        let new_text = tokenizer.decode(&self.ids[self.prefix_offset..], self.skip_special_tokens)?;
        Ok((prefix_text, new_text))
    }
}

/// `text` less its leading `prefix`; if a decoder rewrote the prefix, skip as many characters
/// as the prefix has (what vLLM does).
fn suffix_after(text: &str, prefix: &str) -> String {
    match text.strip_prefix(prefix) {
        Some(rest) => rest.to_string(),
        None => text.chars().skip(prefix.chars().count()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{byte_fallback_json, byte_level_json, parse};
    use tf_core::Vocab;

    const TEXTS: [&str; 5] =
        ["hello world", "héllo wörld", "世界 and 🎉🎉 emoji", " leading space, then ĀĒĪŌŪ and ñ", "hi 👩‍👩‍👧 family"];

    fn tokenizer(json: (serde_json::Value, u32)) -> Tokenizer {
        Tokenizer::from_tokenizer(parse(&json.0), Vocab::new(json.1 as usize).unwrap()).unwrap()
    }

    /// Streams `ids` and checks every piece is whole characters and all of them add up.
    fn check_stream(tok: &Tokenizer, ids: &[u32], skip_special_tokens: bool) -> Vec<String> {
        let mut decoder = IncrementalDecoder::new(&[], skip_special_tokens);
        let mut pieces: Vec<String> = ids.iter().map(|&id| decoder.step(tok, id).unwrap()).collect();
        pieces.push(decoder.finish(tok).unwrap());
        for piece in &pieces {
            assert!(!piece.contains(REPLACEMENT), "partial character emitted: {pieces:?}");
        }
        assert_eq!(pieces.concat(), tok.decode(ids, skip_special_tokens).unwrap());
        pieces
    }

    #[test]
    fn byte_level_stream_equals_decode() {
        let tok = tokenizer(byte_level_json());
        for text in TEXTS {
            let ids = tok.encode(text, true).unwrap();
            let pieces = check_stream(&tok, ids.as_slice(), true);
            assert_eq!(pieces.concat(), text);
            check_stream(&tok, ids.as_slice(), false);
        }
    }

    #[test]
    fn multi_byte_character_waits_for_its_last_byte() {
        let tok = tokenizer(byte_level_json());
        let ids = tok.encode("a🎉", false).unwrap();
        assert_eq!(ids.len(), 5, "one id for 'a', four for the emoji's bytes");
        let mut decoder = IncrementalDecoder::new(&[], false);
        let pieces: Vec<String> = ids.as_slice().iter().map(|&id| decoder.step(&tok, id).unwrap()).collect();
        assert_eq!(pieces, ["a", "", "", "", "🎉"]);
        assert_eq!(decoder.finish(&tok).unwrap(), "");
    }

    #[test]
    fn byte_fallback_stream_equals_decode() {
        let tok = tokenizer(byte_fallback_json());
        for text in TEXTS {
            let ids = tok.encode(text, true).unwrap();
            let pieces = check_stream(&tok, ids.as_slice(), true);
            assert_eq!(pieces.concat(), text);
        }
    }

    #[test]
    fn continues_a_prompt_with_its_leading_space() {
        let tok = tokenizer(byte_fallback_json());
        let prompt = tok.encode("hi", true).unwrap();
        let all = tok.encode("hi hi héllo", true).unwrap();
        assert!(all.as_slice().starts_with(prompt.as_slice()));
        let mut decoder = IncrementalDecoder::new(prompt.as_slice(), true);
        let mut out = String::new();
        for &id in &all.as_slice()[prompt.len()..] {
            out += &decoder.step(&tok, id).unwrap();
        }
        out += &decoder.finish(&tok).unwrap();
        assert_eq!(out, " hi héllo");
    }

    #[test]
    fn finish_flushes_an_incomplete_character() {
        let tok = tokenizer(byte_level_json());
        let ids = tok.encode("é", false).unwrap();
        let mut decoder = IncrementalDecoder::new(&[], false);
        assert_eq!(decoder.step(&tok, ids.as_slice()[0]).unwrap(), "");
        assert_eq!(decoder.finish(&tok).unwrap(), REPLACEMENT.to_string());
        assert_eq!(decoder.finish(&tok).unwrap(), "");
    }
}
