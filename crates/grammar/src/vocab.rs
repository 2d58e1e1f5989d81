//! Each token id's bytes, read from a Hugging Face `tokenizer.json` (byte-level or byte-fallback
//! vocabularies), special tokens marked as llguidance expects; every malformed entry is an error.

use serde_json::Value;
use thiserror::Error;

/// A vocabulary whose token bytes cannot be read.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("tokenizer vocabulary: {0}")]
pub struct VocabError(String);

/// The marker llguidance puts before a special token's text.
const SPECIAL: u8 = 0xff;

/// Per id below `rows`, its bytes (empty for ids the tokenizer does not have), from the
/// tokenizer's JSON form.
pub fn token_bytes(tokenizer_json: &Value, rows: usize) -> Result<Vec<Vec<u8>>, VocabError> {
    let err = |m: String| VocabError(m);
    let (byte_level, space) = decoder_kind(&tokenizer_json["decoder"]).ok_or_else(|| {
        err(format!("decoder {} is neither byte-level nor byte-fallback", tokenizer_json["decoder"]["type"]))
    })?;
    let mut out = vec![Vec::new(); rows];
    let unmap = byte_unmap();
    if let Some(vocab) = tokenizer_json["model"]["vocab"].as_object() {
        for (text, id) in vocab {
            let id = id.as_u64().ok_or_else(|| err(format!("id of {text:?} is not an integer")))? as usize;
            let Some(slot) = out.get_mut(id) else { continue };
            *slot = if byte_level {
                text.chars()
                    .map(|c| unmap(c).ok_or_else(|| err(format!("token {text:?} is not byte-level"))))
                    .collect::<Result<_, _>>()?
            } else if let Some(b) = hex_byte(text) {
                vec![b]
            } else {
                text.replace(space, " ").into_bytes()
            };
        }
    }
    for t in tokenizer_json["added_tokens"].as_array().into_iter().flatten() {
        let (Some(id), Some(content)) = (t["id"].as_u64(), t["content"].as_str()) else {
            return Err(err("an added token without id or content".into()));
        };
        let Some(slot) = out.get_mut(id as usize) else { continue };
        let mut bytes = Vec::with_capacity(content.len() + 1);
        if t["special"].as_bool().unwrap_or(false) {
            bytes.push(SPECIAL);
        }
        bytes.extend_from_slice(content.as_bytes());
        *slot = bytes;
    }
    Ok(out)
}

/// (byte-level, the character standing for a space) of a decoder, or `None` when unknown.
fn decoder_kind(d: &Value) -> Option<(bool, char)> {
    match d["type"].as_str()? {
        "ByteLevel" => Some((true, ' ')),
        "Sequence" => {
            let parts = d["decoders"].as_array()?;
            if parts.iter().any(|p| p["type"] == "ByteLevel") {
                return Some((true, ' '));
            }
            parts.iter().any(|p| p["type"] == "ByteFallback").then_some(())?;
            let space = parts
                .iter()
                .filter(|p| p["type"] == "Replace" && p["content"] == " ")
                .find_map(|p| p["pattern"]["String"].as_str().and_then(single_char))
                .unwrap_or('\u{2581}');
            Some((false, space))
        }
        _ => None,
    }
}

fn single_char(s: &str) -> Option<char> {
    let mut c = s.chars();
    let first = c.next()?;
    c.next().is_none().then_some(first)
}

/// `<0xNN>`'s byte.
fn hex_byte(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// GPT-2's byte-to-character map, inverted.
fn byte_unmap() -> impl Fn(char) -> Option<u8> {
    let mut map = std::collections::HashMap::new();
    let mut n = 0u32;
    for b in 0..=255u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        if let Some(c) = char::from_u32(c) {
            map.insert(c, b as u8);
        }
    }
    move |c| map.get(&c).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn byte_level_tokens_map_back_to_their_bytes_and_specials_are_marked() {
        let j = json!({
            "decoder": {"type": "ByteLevel"},
            "model": {"vocab": {"a": 0, "\u{120}b": 1, "\u{10a}": 2, "\u{e3}\u{123}": 3}},
            "added_tokens": [{"id": 4, "content": "<|end|>", "special": true}, {"id": 9, "content": "x", "special": false}]
        });
        let b = token_bytes(&j, 6).unwrap();
        assert_eq!(b[0], b"a");
        assert_eq!(b[1], b" b");
        assert_eq!(b[2], b"\n");
        assert_eq!(b[3], [0xe3, 0x81]);
        assert_eq!(b[4], b"\xff<|end|>");
        assert!(b[5].is_empty(), "no token: no bytes");
    }

    #[test]
    fn byte_fallback_tokens_read_hex_bytes_and_the_space_marker() {
        let j = json!({
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}, {"type": "ByteFallback"}]},
            "model": {"vocab": {"<0x0A>": 0, "\u{2581}hi": 1}},
        });
        let b = token_bytes(&j, 2).unwrap();
        assert_eq!(b, [b"\n".to_vec(), b" hi".to_vec()]);
        assert!(token_bytes(&json!({"decoder": {"type": "WordPiece"}}), 2).is_err());
        let bad = json!({"decoder": {"type": "ByteLevel"}, "model": {"vocab": {"\u{4e00}": 0}}});
        assert!(token_bytes(&bad, 1).is_err());
    }
}
