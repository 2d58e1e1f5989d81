//! A GGUF file's vocabulary (llama.cpp's `tokenizer.ggml.*` metadata) as a Hugging Face tokenizer,
//! built the way transformers' GGUF loader builds it (`integrations/gguf/gguf_tokenizer_mapping.py`)
//! so that both give the same ids for the same text.

mod byte_level;
mod sentencepiece;

use tf_core::Vocab;
use tf_formats::error::FormatError;
use tf_formats::gguf::GgufFile;
use tokenizers::AddedToken;
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};

use crate::{SpecialIds, TokenizeError, Tokenizer};

/// llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`: a special token such as `<bos>`.
const CONTROL: i32 = 3;
/// llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`: a token always matched whole, such as `<think>`.
const USER_DEFINED: i32 = 4;

/// Builds the tokenizer of a GGUF file's vocabulary and checks it against the embedding table:
/// every token id, the special ids (`tokenizer.ggml.*_token_id`) and the BOS/EOS the
/// post-processor adds (`tokenizer.ggml.add_bos_token` / `add_eos_token`) are below `vocab.rows()`.
/// The chat template comes from `tokenizer.chat_template`.
pub fn tokenizer_from_gguf(f: &GgufFile, vocab: Vocab) -> Result<Tokenizer, TokenizeError> {
    let meta = Meta(f);
    let kind = Kind::read(&meta)?;
    let file = GgufVocab::read(&meta)?;
    let mut inner = match kind {
        Kind::SentencePiece(style) => sentencepiece::build(&meta, &file, style)?,
        Kind::ByteLevel => byte_level::build(&meta, &file, meta.str("tokenizer.ggml.pre")?)?,
    };
    add_typed_tokens(&meta, &mut inner, &file, kind == Kind::ByteLevel)?;

    let named = NamedIds::read(&meta, &file.tokens)?;
    for (token, _) in [&named.bos, &named.eos, &named.unk, &named.pad].into_iter().flatten() {
        add_named_special(&meta, &mut inner, token)?;
    }
    let add_bos = match kind {
        // Gemma 4's chat template writes `<bos>` itself.
        Kind::SentencePiece(sentencepiece::Style::Gemma4) => false,
        // A SentencePiece vocabulary that does not say gets BOS, in transformers and llama.cpp.
        Kind::SentencePiece(_) => meta.bool("tokenizer.ggml.add_bos_token")?.unwrap_or(true),
        Kind::ByteLevel => meta.bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false),
    };
    let add_eos = meta.bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let bos = named.bos.as_ref().filter(|_| add_bos);
    let eos = named.eos.as_ref().filter(|_| add_eos);
    inner.with_post_processor(Some(post_processor(&meta, bos, eos)?));

    let template = meta.str("tokenizer.chat_template")?.map(str::to_string);
    let id = |named: &Option<(String, u32)>| named.as_ref().map(|&(_, id)| id);
    let special = SpecialIds { bos_id: id(&named.bos), eos_id: id(&named.eos), pad_id: id(&named.pad) };
    Ok(Tokenizer::from_tokenizer(inner, vocab)?.with_special_ids(special)?.with_chat_template(template))
}

/// `tokenizer.ggml.model`, with transformers' choice of pipeline for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// "llama" (pipeline by architecture) or "gemma4".
    SentencePiece(sentencepiece::Style),
    /// "gpt2".
    ByteLevel,
}

impl Kind {
    fn read(meta: &Meta) -> Result<Kind, TokenizeError> {
        let key = "tokenizer.ggml.model";
        match meta.str(key)? {
            Some("llama") => {
                let arch = meta.str("general.architecture")?.unwrap_or_default();
                let prefix = meta.bool("tokenizer.ggml.add_space_prefix")?;
                Ok(Kind::SentencePiece(sentencepiece::Style::for_llama_kind(arch, prefix)))
            }
            Some("gemma4") => Ok(Kind::SentencePiece(sentencepiece::Style::Gemma4)),
            Some("gpt2") => Ok(Kind::ByteLevel),
            Some(other) => {
                Err(meta.bad(key, &format!("{other:?} is not a vocabulary this loader builds (llama, gemma4, gpt2)")))
            }
            None => Err(meta.bad(key, "missing: the file has no vocabulary")),
        }
    }
}

/// Typed access to the metadata, with errors that name the file and the key.
struct Meta<'a>(&'a GgufFile);

impl Meta<'_> {
    fn bad(&self, key: &str, message: &str) -> TokenizeError {
        TokenizeError::Parse { path: self.0.path().to_path_buf(), message: format!("metadata '{key}': {message}") }
    }

    fn format(&self, e: FormatError) -> TokenizeError {
        let message = match e {
            FormatError::Header { msg, .. } => msg,
            other => other.to_string(),
        };
        TokenizeError::Parse { path: self.0.path().to_path_buf(), message }
    }

    fn str(&self, key: &str) -> Result<Option<&str>, TokenizeError> {
        self.0.get_str(key).map_err(|e| self.format(e))
    }

    fn bool(&self, key: &str) -> Result<Option<bool>, TokenizeError> {
        self.0.get_bool(key).map_err(|e| self.format(e))
    }

    fn u64(&self, key: &str) -> Result<Option<u64>, TokenizeError> {
        self.0.get_u64(key).map_err(|e| self.format(e))
    }

    fn strs(&self, key: &str) -> Result<Option<Vec<String>>, TokenizeError> {
        self.0.get_str_array(key).map_err(|e| self.format(e))
    }

    /// An array that, when present, has one item per token.
    fn per_token<T>(
        &self,
        key: &str,
        num_tokens: usize,
        items: Option<Vec<T>>,
    ) -> Result<Option<Vec<T>>, TokenizeError> {
        match items {
            Some(items) if items.len() != num_tokens => {
                Err(self.bad(key, &format!("{} items for {num_tokens} tokens", items.len())))
            }
            items => Ok(items),
        }
    }
}

/// The vocabulary arrays of the file.
struct GgufVocab {
    /// `tokenizer.ggml.tokens`, in id order.
    tokens: Vec<String>,
    /// `tokenizer.ggml.token_type` (empty when absent).
    types: Vec<i32>,
    /// `tokenizer.ggml.scores`, each finite or infinite.
    scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.merges` as pairs, best first.
    merges: Option<Vec<(String, String)>>,
}

impl GgufVocab {
    fn read(meta: &Meta) -> Result<GgufVocab, TokenizeError> {
        let key = "tokenizer.ggml.tokens";
        let tokens = meta.strs(key)?.ok_or_else(|| meta.bad(key, "missing"))?;
        if tokens.is_empty() || u32::try_from(tokens.len()).is_err() {
            return Err(meta.bad(key, &format!("{} tokens", tokens.len())));
        }
        let n = tokens.len();
        let types = meta.0.get_i32_array("tokenizer.ggml.token_type").map_err(|e| meta.format(e))?;
        let types = meta.per_token("tokenizer.ggml.token_type", n, types)?.unwrap_or_default();
        let scores = meta.0.get_f32_array("tokenizer.ggml.scores").map_err(|e| meta.format(e))?;
        let scores = meta.per_token("tokenizer.ggml.scores", n, scores)?;
        if let Some(i) = scores.as_ref().and_then(|s| s.iter().position(|x| x.is_nan())) {
            return Err(meta.bad("tokenizer.ggml.scores", &format!("score of token {i} is NaN")));
        }
        let merges = match meta.strs("tokenizer.ggml.merges")? {
            None => None,
            Some(lines) => Some(split_merges(meta, lines)?),
        };
        Ok(GgufVocab { tokens, types, scores, merges })
    }

    fn token_type(&self, id: usize) -> Option<i32> {
        self.types.get(id).copied()
    }
}

/// `"a b"` lines into pairs.
fn split_merges(meta: &Meta, lines: Vec<String>) -> Result<Vec<(String, String)>, TokenizeError> {
    lines
        .into_iter()
        .enumerate()
        .map(|(i, line)| match line.split(' ').collect::<Vec<_>>().as_slice() {
            [a, b] => Ok((a.to_string(), b.to_string())),
            _ => Err(meta.bad("tokenizer.ggml.merges", &format!("merge {i} {line:?} is not two tokens"))),
        })
        .collect()
}

/// The tokens (text and id) the file names as special, each within its token list.
struct NamedIds {
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
    unk: Option<(String, u32)>,
    pad: Option<(String, u32)>,
}

impl NamedIds {
    fn read(meta: &Meta, tokens: &[String]) -> Result<NamedIds, TokenizeError> {
        let named = |key: &str| -> Result<Option<(String, u32)>, TokenizeError> {
            let Some(id) = meta.u64(key)? else { return Ok(None) };
            match usize::try_from(id).ok().and_then(|i| tokens.get(i)) {
                Some(token) => Ok(Some((token.clone(), id as u32))),
                None => Err(meta.bad(key, &format!("id {id} is past the {} tokens", tokens.len()))),
            }
        };
        Ok(NamedIds {
            bos: named("tokenizer.ggml.bos_token_id")?,
            eos: named("tokenizer.ggml.eos_token_id")?,
            unk: named("tokenizer.ggml.unknown_token_id")?,
            pad: named("tokenizer.ggml.padding_token_id")?,
        })
    }
}

/// Control tokens become special added tokens and user-defined ones plain added tokens, both
/// matched whole in raw text. In a byte-level vocabulary a control token spelled outside the byte
/// alphabet is a llama.cpp mislabel and stays an ordinary token, as in transformers. A token whose
/// spelling is not in the vocabulary (a respelled one) is left out rather than given a new id.
fn add_typed_tokens(
    meta: &Meta,
    inner: &mut tokenizers::Tokenizer,
    file: &GgufVocab,
    byte_level: bool,
) -> Result<(), TokenizeError> {
    let of_type =
        |wanted: i32| file.tokens.iter().enumerate().filter(move |&(id, _)| file.token_type(id) == Some(wanted));
    let control: Vec<AddedToken> = of_type(CONTROL)
        .filter(|(_, t)| !byte_level || t.chars().all(byte_level::in_alphabet))
        .filter(|(_, t)| inner.token_to_id(t).is_some())
        .map(|(_, t)| AddedToken::from(t.as_str(), true).normalized(false))
        .collect();
    inner.add_special_tokens(control).map_err(|e| meta.bad("tokenizer.ggml.token_type", &e.to_string()))?;
    let user: Vec<AddedToken> = of_type(USER_DEFINED)
        .filter(|(_, t)| inner.token_to_id(t).is_some())
        .map(|(_, t)| AddedToken::from(t.as_str(), false).normalized(false))
        .collect();
    inner.add_tokens(user).map_err(|e| meta.bad("tokenizer.ggml.token_type", &e.to_string()))?;
    Ok(())
}

/// transformers makes the named tokens (bos, eos, unk, pad) special unless already added.
fn add_named_special(meta: &Meta, inner: &mut tokenizers::Tokenizer, token: &str) -> Result<(), TokenizeError> {
    if inner.get_added_vocabulary().get_vocab().contains_key(token) || inner.token_to_id(token).is_none() {
        return Ok(());
    }
    let added = AddedToken::from(token, true).normalized(false);
    inner.add_special_tokens([added]).map_err(|e| meta.bad("tokenizer.ggml.tokens", &e.to_string()))?;
    Ok(())
}

/// `[BOS] $A [EOS]` for one sequence and `[BOS] $A [BOS] $B` (with EOS after each) for a pair, as
/// transformers' `update_post_processor` writes it. Pieces are keyed by role, so a token text
/// with spaces or colons cannot break the template.
fn post_processor(
    meta: &Meta,
    bos: Option<&(String, u32)>,
    eos: Option<&(String, u32)>,
) -> Result<TemplateProcessing, TokenizeError> {
    let sequence = |seq: &str, type_id: u32| {
        let mut pieces = Vec::new();
        if bos.is_some() {
            pieces.push(format!("bos:{type_id}"));
        }
        pieces.push(format!("${seq}:{type_id}"));
        if eos.is_some() {
            pieces.push(format!("eos:{type_id}"));
        }
        pieces
    };
    let single = sequence("A", 0);
    let pair = [single.clone(), sequence("B", 1)].concat();
    let mut specials = Vec::new();
    for (key, token) in [("bos", bos), ("eos", eos)] {
        if let Some((text, id)) = token {
            let special = SpecialToken::new(key.to_string(), vec![*id], vec![text.clone()]);
            specials.push(special.map_err(|e| meta.bad("tokenizer.ggml.tokens", &e.to_string()))?);
        }
    }
    let bad = |e: String| meta.bad("tokenizer.ggml.add_bos_token", &e);
    TemplateProcessing::builder()
        .try_single(single)
        .map_err(bad)?
        .try_pair(pair)
        .map_err(bad)?
        .special_tokens(specials)
        .build()
        .map_err(|e| bad(e.to_string()))
}
