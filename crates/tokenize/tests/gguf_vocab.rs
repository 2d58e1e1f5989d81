//! GGUF vocabularies as tokenizers, on tiny synthetic files: the ids, decodings and special ids
//! equal what transformers builds from the same metadata (fixtures/gguf_synthetic_vocab.json,
//! made by fixtures/gguf_synthetic_vocab.py), and bad vocabularies are refused by key.

use std::path::Path;

use serde_json::Value;
use tf_core::Vocab;
use tf_formats::gguf::writer::{GgufWriter, WriteValue};
use tf_formats::gguf::{GgufFile, ValueType};
use tf_tokenize::{TokenizeError, Tokenizer, tokenizer_from_gguf};

const CASES: &str = include_str!("fixtures/gguf_synthetic_vocab.json");

/// One fixture case: its metadata as written, and the expected encodings.
struct Case {
    name: String,
    metadata: Vec<(String, WriteValue)>,
    encode: Vec<Value>,
}

fn cases() -> Vec<Case> {
    let root: Value = serde_json::from_str(CASES).unwrap();
    root["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: c["name"].as_str().unwrap().to_string(),
            metadata: c["metadata"].as_array().unwrap().iter().map(write_value).collect(),
            encode: c["encode"].as_array().unwrap().clone(),
        })
        .collect()
}

/// `[key, kind, value]` as the generator wrote it.
fn write_value(entry: &Value) -> (String, WriteValue) {
    let (key, kind, v) = (entry[0].as_str().unwrap(), entry[1].as_str().unwrap(), &entry[2]);
    let items = || v.as_array().unwrap().iter();
    let value = match kind {
        "str" => WriteValue::str(v.as_str().unwrap()),
        "u32" => WriteValue::U32(v.as_u64().unwrap() as u32),
        "bool" => WriteValue::Bool(v.as_bool().unwrap()),
        "strs" => WriteValue::Array(ValueType::Str, items().map(|s| WriteValue::str(s.as_str().unwrap())).collect()),
        "f32s" => WriteValue::f32s(&items().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<_>>()),
        "i32s" => WriteValue::i32s(&items().map(|x| x.as_i64().unwrap() as i32).collect::<Vec<_>>()),
        other => panic!("unknown kind {other}"),
    };
    (key.to_string(), value)
}

fn gguf(metadata: &[(String, WriteValue)]) -> GgufFile {
    let mut w = GgufWriter::new();
    for (key, value) in metadata {
        w.kv(key, value.clone());
    }
    GgufFile::from_bytes(Path::new("vocab.gguf"), w.to_bytes()).unwrap()
}

/// The number of tokens (1000 when the file lists none).
fn num_tokens(metadata: &[(String, WriteValue)]) -> usize {
    match metadata.iter().find(|(k, _)| k == "tokenizer.ggml.tokens") {
        Some((_, WriteValue::Array(_, items))) => items.len(),
        _ => 1000,
    }
}

/// The tokenizer, checked against an embedding table with one row per token.
fn load(metadata: &[(String, WriteValue)]) -> Result<Tokenizer, TokenizeError> {
    tokenizer_from_gguf(&gguf(metadata), Vocab::new(num_tokens(metadata)).unwrap())
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn case(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap()
}

/// Replaces (or appends) one metadata entry.
fn with(mut metadata: Vec<(String, WriteValue)>, key: &str, value: WriteValue) -> Vec<(String, WriteValue)> {
    metadata.retain(|(k, _)| k != key);
    metadata.push((key.to_string(), value));
    metadata
}

fn without(mut metadata: Vec<(String, WriteValue)>, key: &str) -> Vec<(String, WriteValue)> {
    metadata.retain(|(k, _)| k != key);
    metadata
}

#[test]
fn encodes_and_decodes_like_transformers() {
    let cases = cases();
    assert_eq!(cases.len(), 9);
    for case in cases {
        let tok = load(&case.metadata).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(tok.len(), num_tokens(&case.metadata), "{}", case.name);
        for e in &case.encode {
            let text = e["text"].as_str().unwrap();
            let what = format!("{} {text:?}", case.name);
            let got = tok.encode(text, true).unwrap();
            assert_eq!(got.as_slice(), ids(&e["ids"]), "{what}");
            let plain = tok.encode(text, false).unwrap();
            assert_eq!(plain.as_slice(), ids(&e["ids_without_special"]), "{what} without special tokens");
            assert_eq!(tok.decode(got.as_slice(), false).unwrap(), e["decoded"].as_str().unwrap(), "{what}");
            let skipped = tok.decode(got.as_slice(), true).unwrap();
            assert_eq!(skipped, e["decoded_skip_special"].as_str().unwrap(), "{what} skipping special tokens");
        }
    }
}

#[test]
fn fixture_exercises_the_differences_between_pipelines() {
    // Each of these encodes some text differently from the others; a builder that ignored the
    // architecture, the prefix flag or the pre-tokenizer name would fail the test above.
    let first_ids = |name: &str, text: &str| -> Vec<u32> {
        let c = case(name);
        ids(&c.encode.iter().find(|e| e["text"] == text).unwrap()["ids"])
    };
    assert_ne!(first_ids("llama_spm", " hello"), first_ids("phi3_spm", " hello"));
    assert_ne!(first_ids("llama_spm", "hello world")[1..], first_ids("llama_spm_no_prefix_eos", "hello world")[..3]);
    assert_ne!(first_ids("gpt2_llama_bpe", "12345 123 1")[1..], first_ids("gpt2_qwen2", "12345 123 1"));
    assert_ne!(first_ids("gpt2_qwen2", "line\n\nnext\r\n"), first_ids("gpt2_default", "line\n\nnext\r\n"));
}

#[test]
fn special_ids_and_chat_template_come_from_metadata() {
    let tok = load(&case("gemma3_spm").metadata).unwrap();
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.pad_id()), (Some(2), Some(1), Some(0)));
    assert!(tok.chat_template().unwrap().contains("bos_token"));
    assert_eq!(tok.encode("", true).unwrap().as_slice(), &[2]);

    let tok = load(&case("gpt2_qwen2").metadata).unwrap();
    let eos = tok.eos_id().unwrap();
    assert_eq!((tok.bos_id(), tok.id_to_token(eos).as_deref()), (None, Some("<|end_of_text|>")));
    assert!(tok.encode("", true).unwrap().is_empty());
    assert_eq!(tok.chat_template(), None);
}

#[test]
fn add_bos_and_add_eos_follow_metadata() {
    let base = case("llama_spm").metadata;
    let tok = load(&with(base.clone(), "tokenizer.ggml.add_bos_token", WriteValue::Bool(false))).unwrap();
    assert!(tok.encode("", true).unwrap().is_empty());
    // A SentencePiece vocabulary that does not say adds BOS.
    let tok = load(&without(base.clone(), "tokenizer.ggml.add_bos_token")).unwrap();
    assert_eq!(tok.encode("", true).unwrap().as_slice(), &[1]);
    let tok = load(&with(base.clone(), "tokenizer.ggml.add_eos_token", WriteValue::Bool(true))).unwrap();
    assert_eq!(tok.encode("", true).unwrap().as_slice(), &[1, 2]);
    // Without a BOS id there is nothing to add.
    let tok = load(&without(base, "tokenizer.ggml.bos_token_id")).unwrap();
    assert!(tok.encode("", true).unwrap().is_empty());
    assert_eq!(tok.bos_id(), None);
}

fn refused(metadata: &[(String, WriteValue)], key: &str) -> String {
    let err = load(metadata).map(|_| ()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TokenizeError::Parse { .. }), "{msg}");
    assert!(msg.contains(key) && msg.contains("vocab.gguf"), "{key}: {msg}");
    msg
}

#[test]
fn bad_vocabularies_are_refused_naming_the_key() {
    let spm = case("llama_spm").metadata;
    let n = num_tokens(&spm);
    let msg = refused(&with(spm.clone(), "tokenizer.ggml.model", WriteValue::str("t5")), "tokenizer.ggml.model");
    assert!(msg.contains("\"t5\""), "{msg}");
    refused(&without(spm.clone(), "tokenizer.ggml.model"), "tokenizer.ggml.model");
    refused(&without(spm.clone(), "tokenizer.ggml.tokens"), "tokenizer.ggml.tokens");
    refused(&without(spm.clone(), "tokenizer.ggml.scores"), "tokenizer.ggml.scores");
    refused(&with(spm.clone(), "tokenizer.ggml.scores", WriteValue::f32s(&[0.0; 3])), "tokenizer.ggml.scores");
    let mut nan = vec![0.0f32; n];
    nan[5] = f32::NAN;
    refused(&with(spm.clone(), "tokenizer.ggml.scores", WriteValue::f32s(&nan)), "tokenizer.ggml.scores");
    refused(&with(spm.clone(), "tokenizer.ggml.token_type", WriteValue::i32s(&[1; 2])), "tokenizer.ggml.token_type");
    let past = WriteValue::U32(n as u32);
    refused(&with(spm.clone(), "tokenizer.ggml.eos_token_id", past.clone()), "tokenizer.ggml.eos_token_id");
    refused(&with(spm.clone(), "tokenizer.ggml.padding_token_id", past), "tokenizer.ggml.padding_token_id");
    refused(&with(spm, "tokenizer.ggml.add_bos_token", WriteValue::U32(1)), "tokenizer.ggml.add_bos_token");

    let bpe = case("gpt2_llama_bpe").metadata;
    refused(&without(bpe.clone(), "tokenizer.ggml.merges"), "tokenizer.ggml.merges");
    let msg = refused(&with(bpe.clone(), "tokenizer.ggml.merges", WriteValue::strs(&["h e", "hel"])), "merges");
    assert!(msg.contains("merge 1"), "{msg}");
    // A merge of tokens the vocabulary lacks.
    refused(&with(bpe.clone(), "tokenizer.ggml.merges", WriteValue::strs(&["q z"])), "tokenizer.ggml.merges");
    // A split this crate does not know is refused, as llama.cpp refuses it, not guessed.
    let msg = refused(&with(bpe, "tokenizer.ggml.pre", WriteValue::str("next-model")), "tokenizer.ggml.pre");
    assert!(msg.contains("\"next-model\" is not known"), "{msg}");
}

#[test]
fn ids_past_the_embedding_table_are_refused() {
    let spm = case("llama_spm").metadata;
    let n = num_tokens(&spm);
    let err = tokenizer_from_gguf(&gguf(&spm), Vocab::new(n - 1).unwrap()).unwrap_err();
    assert!(matches!(err, TokenizeError::TokenPastRows { id, .. } if id as usize == n - 1), "{err}");
    // More rows than tokens is fine (padded embedding tables).
    let tok = tokenizer_from_gguf(&gguf(&spm), Vocab::new(n + 64).unwrap()).unwrap();
    assert_eq!(tok.vocab().rows(), n + 64);
}
