//! The real Gemma 3 270M GGUF's 262144-token vocabulary: every string of
//! fixtures/gemma3_gguf_encode.json (made by fixtures/gemma3_gguf_encode.py) and of the model
//! reference (tests/fixtures/gemma3_270m_gguf/reference.json) encodes to transformers' ids and
//! decodes as transformers decodes. Run with
//! `TF_GEMMA3_GGUF=$(scripts/fetch_gemma3_gguf.sh) cargo test -p tf-tokenize --test gguf_gemma3 -- --ignored --nocapture`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use tf_core::Vocab;
use tf_formats::gguf::GgufFile;
use tf_tokenize::{Tokenizer, tokenizer_from_gguf};

const ENCODE: &str = include_str!("fixtures/gemma3_gguf_encode.json");
const ROWS: usize = 262_144;

fn real_file() -> PathBuf {
    match std::env::var_os("TF_GEMMA3_GGUF") {
        Some(p) => PathBuf::from(p),
        None => panic!("set TF_GEMMA3_GGUF to the path scripts/fetch_gemma3_gguf.sh prints"),
    }
}

fn load() -> Tokenizer {
    let f = GgufFile::open(&real_file()).unwrap();
    let start = Instant::now();
    let tok = tokenizer_from_gguf(&f, Vocab::new(ROWS).unwrap()).unwrap();
    println!("tokenizer_from_gguf: {:.3} s for {} tokens", start.elapsed().as_secs_f64(), tok.len());
    tok
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Every `{text, ids}` of `entries` encodes (with BOS) to `ids`; returns the mismatches.
fn mismatches(tok: &Tokenizer, entries: &[Value]) -> Vec<String> {
    let mut bad = Vec::new();
    for e in entries {
        let text = e["text"].as_str().unwrap();
        let want = ids(&e["ids"]);
        let got = tok.encode(text, true).unwrap();
        if got.as_slice() != want {
            bad.push(format!("{text:?}\n  ours {:?}\n  HF   {want:?}", got.as_slice()));
        }
    }
    bad
}

#[test]
#[ignore = "needs the real GGUF: set TF_GEMMA3_GGUF (scripts/fetch_gemma3_gguf.sh)"]
fn gemma3_vocab_encodes_and_decodes_like_transformers() {
    let tok = load();
    assert_eq!(tok.len(), ROWS);
    assert_eq!((tok.bos_id(), tok.eos_id(), tok.pad_id()), (Some(2), Some(1), Some(0)));
    assert_eq!(tok.chat_template(), None, "the base model's GGUF has no template");

    let fixture: Value = serde_json::from_str(ENCODE).unwrap();
    let entries = fixture["encode"].as_array().unwrap();
    assert!(entries.len() >= 15);
    let bad = mismatches(&tok, entries);
    assert!(bad.is_empty(), "{} of {} differ from transformers:\n{}", bad.len(), entries.len(), bad.join("\n"));
    for e in entries {
        let text = e["text"].as_str().unwrap();
        let plain = tok.encode(text, false).unwrap();
        assert_eq!(plain.as_slice(), ids(&e["ids_without_special"]), "{text:?} without special tokens");
        let with_bos = ids(&e["ids"]);
        assert_eq!(tok.decode(&with_bos, false).unwrap(), e["decoded"].as_str().unwrap(), "{text:?}");
        let skipped = tok.decode(&with_bos, true).unwrap();
        assert_eq!(skipped, e["decoded_skip_special"].as_str().unwrap(), "{text:?} skipping special tokens");
        if !text.contains('<') {
            assert_eq!(skipped, text, "round trip");
        }
    }
}

#[test]
#[ignore = "needs the real GGUF: set TF_GEMMA3_GGUF (scripts/fetch_gemma3_gguf.sh)"]
fn gemma3_prompts_of_the_model_reference_match() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gemma3_270m_gguf/reference.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        panic!("{} is missing", path.display());
    };
    let reference: Value = serde_json::from_str(&text).unwrap();
    let tok = load();
    let mut entries = reference["encode"].as_array().unwrap().clone();
    entries.extend(reference["prompts"].as_array().unwrap().iter().cloned());
    let bad = mismatches(&tok, &entries);
    assert!(bad.is_empty(), "{} of {} differ from transformers:\n{}", bad.len(), entries.len(), bad.join("\n"));
}
