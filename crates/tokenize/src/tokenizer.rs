//! A Hugging Face tokenizer checked against the embedding table at load (docs/architecture.md, loading):
//! every id it can produce, added and special ones included, is below the row count.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tf_core::safe_file::SafeFileError;
use tf_core::{TokenIds, Vocab};

use crate::TokenizeError;

/// Name used in errors for a tokenizer built in code rather than read from a file.
const BUILT_IN_CODE: &str = "tokenizer";

/// The special ids a checkpoint declares, each already checked against the row count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    /// Beginning-of-sequence id.
    pub bos_id: Option<u32>,
    /// End-of-sequence id.
    pub eos_id: Option<u32>,
    /// Padding id.
    pub pad_id: Option<u32>,
}

/// A tokenizer whose every id is known to be below the embedding table's row count.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer with special-token spellings encoded as plain text.
    literal: tokenizers::Tokenizer,
    /// The text of every special added token (longest first).
    special_texts: Vec<String>,
    vocab: Vocab,
    special: SpecialIds,
    chat_template: Option<String>,
}

impl Tokenizer {
    /// Loads `tokenizer.json` and the optional `tokenizer_config.json` and `chat_template.jinja`
    /// of a Hugging Face checkpoint directory, refusing ids at or past `vocab.rows()`.
    pub fn from_dir(dir: &Path, vocab: Vocab) -> Result<Tokenizer, TokenizeError> {
        let path = dir.join("tokenizer.json");
        let bytes = read(&path)?
            .ok_or_else(|| TokenizeError::Io { path: path.clone(), source: std::io::ErrorKind::NotFound.into() })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| parse_error(&path, e.to_string()))?;
        let mut tokenizer = Tokenizer::checked(inner, vocab, &path.display().to_string())?;

        let config_path = dir.join("tokenizer_config.json");
        if let Some(bytes) = read(&config_path)? {
            let config: Value = serde_json::from_slice(&bytes).map_err(|e| parse_error(&config_path, e.to_string()))?;
            tokenizer.special = tokenizer.resolve_specials(&config, &config_path)?;
            tokenizer.chat_template = chat_template_of(&config, &config_path)?;
        }
        // transformers lets a separate template file win over the config's entry.
        let template_path = dir.join("chat_template.jinja");
        if let Some(bytes) = read(&template_path)? {
            let text = String::from_utf8(bytes).map_err(|_| parse_error(&template_path, "not UTF-8".into()))?;
            tokenizer.chat_template = Some(text);
        }
        Ok(tokenizer)
    }

    /// Wraps a tokenizer built in code (e.g. from a GGUF vocabulary) after the same checks as
    /// [`Tokenizer::from_dir`]; it starts with no special ids and no chat template.
    pub fn from_tokenizer(inner: tokenizers::Tokenizer, vocab: Vocab) -> Result<Tokenizer, TokenizeError> {
        Tokenizer::checked(inner, vocab, BUILT_IN_CODE)
    }

    /// Sets the special ids (e.g. from GGUF metadata), refusing any at or past the row count.
    pub fn with_special_ids(mut self, special: SpecialIds) -> Result<Tokenizer, TokenizeError> {
        let fields = [("bos_token", special.bos_id), ("eos_token", special.eos_id), ("pad_token", special.pad_id)];
        for (field, id) in fields {
            if let Some(id) = id {
                self.check_special(BUILT_IN_CODE, field, id)?;
            }
        }
        self.special = special;
        Ok(self)
    }

    /// Sets the raw chat template text.
    pub fn with_chat_template(mut self, template: Option<String>) -> Tokenizer {
        self.chat_template = template;
        self
    }

    fn checked(inner: tokenizers::Tokenizer, vocab: Vocab, source_name: &str) -> Result<Tokenizer, TokenizeError> {
        let largest = inner.get_vocab(true).into_iter().max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        if let Some((token, id)) = largest
            && id as usize >= vocab.rows()
        {
            return Err(TokenizeError::TokenPastRows {
                source_name: source_name.to_string(),
                token,
                id,
                rows: vocab.rows(),
            });
        }
        let mut literal = inner.clone();
        literal.set_encode_special_tokens(true);
        let mut special_texts: Vec<String> =
            inner.get_added_tokens_decoder().into_values().filter(|t| t.special).map(|t| t.content).collect();
        special_texts.retain(|t| !t.is_empty());
        special_texts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        let tokenizer =
            Tokenizer { inner, literal, special_texts, vocab, special: SpecialIds::default(), chat_template: None };
        // The post-processor's template carries its own ids (e.g. a BOS); encoding nothing
        // shows the ones a single sequence gets.
        let empty = tokenizer.inner.encode("", true).map_err(|e| TokenizeError::Encode(e.to_string()))?;
        if let Some(&id) = empty.get_ids().iter().find(|&&id| id as usize >= vocab.rows()) {
            return Err(TokenizeError::TokenPastRows {
                source_name: format!("{source_name} (post_processor)"),
                token: tokenizer.id_to_token(id).unwrap_or_default(),
                id,
                rows: vocab.rows(),
            });
        }
        Ok(tokenizer)
    }

    fn resolve_specials(&self, config: &Value, path: &Path) -> Result<SpecialIds, TokenizeError> {
        let source_name = path.display().to_string();
        let resolve = |field: &'static str| -> Result<Option<u32>, TokenizeError> {
            let Some(token) = special_token_text(config, field, path)? else {
                return Ok(None);
            };
            let id = self.inner.token_to_id(&token).ok_or_else(|| TokenizeError::UnknownSpecial {
                source_name: source_name.clone(),
                field,
                token,
            })?;
            self.check_special(&source_name, field, id)?;
            Ok(Some(id))
        };
        Ok(SpecialIds { bos_id: resolve("bos_token")?, eos_id: resolve("eos_token")?, pad_id: resolve("pad_token")? })
    }

    fn check_special(&self, source_name: &str, field: &'static str, id: u32) -> Result<(), TokenizeError> {
        if (id as usize) < self.vocab.rows() {
            return Ok(());
        }
        Err(TokenizeError::SpecialPastRows {
            source_name: source_name.to_string(),
            field,
            token: self.id_to_token(id).unwrap_or_default(),
            id,
            rows: self.vocab.rows(),
        })
    }

    /// Encodes text; `add_special_tokens` lets the post-processor add e.g. BOS, as HF does.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<TokenIds, TokenizeError> {
        self.encode_with(&self.inner, text, add_special_tokens)
    }

    /// Encodes text whose special-token spellings stay plain text (`"<|im_end|>"` typed by a
    /// user is those characters, not the control token: SECURITY-CASES 8).
    pub fn encode_literal(&self, text: &str, add_special_tokens: bool) -> Result<TokenIds, TokenizeError> {
        self.encode_with(&self.literal, text, add_special_tokens)
    }

    fn encode_with(&self, t: &tokenizers::Tokenizer, text: &str, add: bool) -> Result<TokenIds, TokenizeError> {
        let encoding = t.encode(text, add).map_err(|e| TokenizeError::Encode(e.to_string()))?;
        // Cannot fail for a tokenizer checked at load; this is how checked ids are made.
        self.vocab.check_u32(encoding.get_ids()).map_err(|bad| TokenizeError::TokenPastRows {
            source_name: BUILT_IN_CODE.to_string(),
            token: self.id_to_token(bad.id as u32).unwrap_or_default(),
            id: bad.id as u32,
            rows: self.vocab.rows(),
        })
    }

    /// Whether `text` spells any special token.
    pub fn spells_special(&self, text: &str) -> bool {
        self.special_texts.iter().any(|t| text.contains(t.as_str()))
    }

    /// Decodes ids to text; ids the tokenizer does not know decode to nothing, as in HF.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizeError> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| TokenizeError::Decode(e.to_string()))
    }

    /// The id of a token's text, added tokens included.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The text of a token id, added tokens included.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Number of tokens the tokenizer knows, added tokens included (may be below the row count).
    pub fn len(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Whether the tokenizer knows no tokens at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The embedding table this tokenizer was checked against.
    pub fn vocab(&self) -> Vocab {
        self.vocab
    }

    /// The special ids from the config, each below the row count.
    pub fn special_ids(&self) -> SpecialIds {
        self.special
    }

    /// Beginning-of-sequence id, if the config names one.
    pub fn bos_id(&self) -> Option<u32> {
        self.special.bos_id
    }

    /// End-of-sequence id, if the config names one.
    pub fn eos_id(&self) -> Option<u32> {
        self.special.eos_id
    }

    /// Padding id, if the config names one.
    pub fn pad_id(&self) -> Option<u32> {
        self.special.pad_id
    }

    /// The raw chat template (Jinja source), if the checkpoint has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// The tokenizer in Hugging Face's `tokenizer.json` form (what structured output reads each
    /// token's bytes from), or `None` when it cannot be written.
    pub fn to_json(&self) -> Option<String> {
        self.inner.to_string(false).ok()
    }
}

/// Reads a regular file (a FIFO or device is refused unread), `None` when it does not exist.
fn read(path: &Path) -> Result<Option<Vec<u8>>, TokenizeError> {
    match tf_core::regular_file::read_regular(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(SafeFileError::Io { source, .. }) => Err(TokenizeError::Io { path: path.to_path_buf(), source }),
        Err(e) => Err(TokenizeError::File(e)),
    }
}

fn parse_error(path: &Path, message: String) -> TokenizeError {
    TokenizeError::Parse { path: PathBuf::from(path), message }
}

/// A special token field: absent or null, a string, or an `AddedToken` object with `content`.
fn special_token_text(config: &Value, field: &str, path: &Path) -> Result<Option<String>, TokenizeError> {
    match config.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Object(o)) => match o.get("content") {
            Some(Value::String(s)) => Ok(Some(s.clone())),
            _ => Err(parse_error(path, format!("{field}: object without a string \"content\""))),
        },
        Some(_) => Err(parse_error(path, format!("{field}: expected a string or an object"))),
    }
}

/// `chat_template`: a string, or a list of `{name, template}` (take "default", else the first).
fn chat_template_of(config: &Value, path: &Path) -> Result<Option<String>, TokenizeError> {
    let bad = |what: &str| parse_error(path, format!("chat_template: {what}"));
    match config.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(list)) => {
            let named = |name: &str| list.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(name));
            let Some(chosen) = named("default").or(list.first()) else {
                return Ok(None);
            };
            match chosen.get("template") {
                Some(Value::String(s)) => Ok(Some(s.clone())),
                _ => Err(bad("list entry without a string \"template\"")),
            }
        }
        Some(_) => Err(bad("expected a string or a list")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{byte_fallback_json, byte_level_json, parse, template, write_json};
    use serde_json::json;

    fn vocab(rows: u32) -> Vocab {
        Vocab::new(rows as usize).unwrap()
    }

    /// A checkpoint dir with the byte-level tokenizer and the given config (if any).
    fn dir_with(config: Option<Value>) -> (tempfile::TempDir, u32) {
        let dir = tempfile::tempdir().unwrap();
        let (json, count) = byte_level_json();
        write_json(dir.path(), "tokenizer.json", &json);
        if let Some(config) = config {
            write_json(dir.path(), "tokenizer_config.json", &config);
        }
        (dir, count)
    }

    #[test]
    fn loads_and_roundtrips() {
        let (dir, count) = dir_with(None);
        let tok = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap();
        assert_eq!(tok.len(), count as usize);
        for text in ["hello world", "héllo wörld, 世界 🎉!", "", "  spaces\tand\nlines "] {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(tok.decode(ids.as_slice(), false).unwrap(), text);
        }
        let hello = tok.token_to_id("hello").unwrap();
        assert_eq!(tok.encode("hello", false).unwrap().as_slice(), &[hello]);
        assert_eq!(tok.id_to_token(hello).as_deref(), Some("hello"));
        assert_eq!((tok.bos_id(), tok.eos_id(), tok.chat_template()), (None, None, None));
    }

    #[test]
    fn literal_encoding_keeps_special_spellings_as_text() {
        let (dir, _) = dir_with(None);
        let tok = Tokenizer::from_dir(dir.path(), vocab(1000)).unwrap();
        let eos = tok.token_to_id("</s>").unwrap();
        let text = "a</s>b";
        assert!(tok.spells_special(text) && !tok.spells_special("a<s b"));
        assert!(tok.encode(text, false).unwrap().as_slice().contains(&eos), "the default parses specials (HF)");
        let literal = tok.encode_literal(text, false).unwrap();
        assert!(!literal.as_slice().contains(&eos), "literal encoding must not produce the control token");
        assert_eq!(tok.decode(literal.as_slice(), false).unwrap(), text);
        assert_eq!(tok.encode_literal("hello world", false).unwrap(), tok.encode("hello world", false).unwrap());
    }

    #[test]
    fn post_processor_adds_bos_only_with_special_tokens() {
        let (dir, _) = dir_with(None);
        let tok = Tokenizer::from_dir(dir.path(), vocab(1000)).unwrap();
        let bos = tok.token_to_id("<s>").unwrap();
        let plain = tok.encode("hello", false).unwrap();
        let with = tok.encode("hello", true).unwrap();
        assert_eq!(with.as_slice()[0], bos);
        assert_eq!(&with.as_slice()[1..], plain.as_slice());
        // An added special token spelled in the text is matched, as HF does by default.
        let spelled = tok.encode("<s>hello", false).unwrap();
        assert_eq!(spelled.as_slice(), with.as_slice());
        assert_eq!(tok.decode(with.as_slice(), true).unwrap(), "hello");
        assert_eq!(tok.decode(with.as_slice(), false).unwrap(), "<s>hello");
    }

    #[test]
    fn smaller_tokenizer_than_table_is_accepted() {
        let (dir, count) = dir_with(None);
        let tok = Tokenizer::from_dir(dir.path(), vocab(count + 300)).unwrap();
        assert_eq!(tok.vocab().rows(), (count + 300) as usize);
        // Rows past the tokenizer decode to nothing, as in HF.
        assert_eq!(tok.decode(&[count + 5], false).unwrap(), "");
    }

    #[test]
    fn ids_past_rows_are_refused_naming_file_token_and_rows() {
        let (dir, count) = dir_with(None);
        // The largest id is the added `</s>`.
        let err = Tokenizer::from_dir(dir.path(), vocab(count - 1)).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, TokenizeError::TokenPastRows { token, id, rows, .. }
            if token == "</s>" && *id == count - 1 && *rows == (count - 1) as usize),
            "{msg}"
        );
        assert!(msg.contains("tokenizer.json") && msg.contains("</s>"), "{msg}");
        // A model token (not added) past the rows.
        let err = Tokenizer::from_dir(dir.path(), vocab(100)).unwrap_err();
        assert!(matches!(err, TokenizeError::TokenPastRows { id, .. } if id == count - 1));
        let (json, count) = byte_level_json();
        let mut no_added = json.clone();
        no_added["added_tokens"] = json!([]);
        no_added["post_processor"] = Value::Null;
        let err = Tokenizer::from_tokenizer(parse(&no_added), vocab(count - 3)).unwrap_err();
        assert!(matches!(err, TokenizeError::TokenPastRows { id, .. } if id == count - 3));
    }

    #[test]
    fn template_id_past_rows_is_refused() {
        let (mut json, count) = byte_level_json();
        json["post_processor"] = template("<s>", count + 7);
        let err = Tokenizer::from_tokenizer(parse(&json), vocab(count)).unwrap_err();
        assert!(matches!(err, TokenizeError::TokenPastRows { id, .. } if id == count + 7), "{err}");
        assert!(Tokenizer::from_tokenizer(parse(&json), vocab(count + 8)).is_ok());
    }

    #[test]
    fn special_ids_from_config() {
        let config = json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>", "special": true},
            "eos_token": "</s>",
            "pad_token": null,
            "chat_template": [
                {"name": "tool_use", "template": "T"},
                {"name": "default", "template": "D"},
            ],
        });
        let (dir, count) = dir_with(Some(config));
        let tok = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap();
        assert_eq!(tok.bos_id(), Some(count - 2));
        assert_eq!(tok.eos_id(), Some(count - 1));
        assert_eq!(tok.pad_id(), None);
        assert_eq!(tok.chat_template(), Some("D"));
        std::fs::write(dir.path().join("chat_template.jinja"), "J").unwrap();
        let tok = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap();
        assert_eq!(tok.chat_template(), Some("J"));
    }

    #[test]
    fn chat_template_string_or_first_of_list() {
        let (dir, count) = dir_with(Some(json!({"chat_template": "{{ x }}"})));
        let tok = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap();
        assert_eq!(tok.chat_template(), Some("{{ x }}"));
        let (dir, count) = dir_with(Some(json!({"chat_template": [{"name": "a", "template": "A"}]})));
        let tok = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap();
        assert_eq!(tok.chat_template(), Some("A"));
    }

    #[test]
    fn bad_special_tokens_are_refused() {
        let (dir, count) = dir_with(Some(json!({"eos_token": "<|missing|>"})));
        let err = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap_err();
        assert!(matches!(&err, TokenizeError::UnknownSpecial { field: "eos_token", .. }), "{err}");
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
        let (dir, count) = dir_with(Some(json!({"bos_token": 5})));
        let err = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap_err();
        assert!(matches!(err, TokenizeError::Parse { .. }), "{err}");
    }

    #[test]
    fn eos_past_rows_is_refused() {
        let (json, count) = byte_fallback_json();
        let tok = Tokenizer::from_tokenizer(parse(&json), vocab(count)).unwrap();
        let special = SpecialIds { bos_id: Some(1), eos_id: Some(count), pad_id: None };
        let err = tok.clone().with_special_ids(special).unwrap_err();
        assert!(
            matches!(err, TokenizeError::SpecialPastRows { field: "eos_token", id, .. }
            if id == count),
            "{err}"
        );
        let ok = SpecialIds { eos_id: Some(2), ..special };
        assert_eq!(tok.with_special_ids(ok).unwrap().eos_id(), Some(2));
    }

    #[test]
    fn missing_or_broken_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let err = Tokenizer::from_dir(dir.path(), vocab(10)).unwrap_err();
        assert!(matches!(err, TokenizeError::Io { .. }), "{err}");
        std::fs::write(dir.path().join("tokenizer.json"), "{not json").unwrap();
        let err = Tokenizer::from_dir(dir.path(), vocab(10)).unwrap_err();
        assert!(matches!(err, TokenizeError::Parse { .. }), "{err}");
        let (json, count) = byte_level_json();
        write_json(dir.path(), "tokenizer.json", &json);
        std::fs::write(dir.path().join("tokenizer_config.json"), "[").unwrap();
        let err = Tokenizer::from_dir(dir.path(), vocab(count)).unwrap_err();
        assert!(matches!(err, TokenizeError::Parse { .. }), "{err}");
    }

    #[test]
    fn byte_fallback_roundtrips() {
        let (json, count) = byte_fallback_json();
        let tok = Tokenizer::from_tokenizer(parse(&json), vocab(count)).unwrap();
        for text in ["hi", "hi hi", "héllo 世界 🎉"] {
            let ids = tok.encode(text, true).unwrap();
            assert_eq!(ids.as_slice()[0], 1);
            assert_eq!(tok.decode(ids.as_slice(), true).unwrap(), text);
        }
        assert_eq!(tok.encode("hi", false).unwrap().as_slice(), &[tok.token_to_id("▁hi").unwrap()]);
    }
}
