//! Tiny tokenizers written as `tokenizer.json` values, for tests that must not ship real ones.

use std::path::Path;

use serde_json::{Value, json};

/// GPT-2's byte to printable-character map, in byte order.
pub fn byte_level_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256;
    (0u32..256)
        .map(|b| {
            if printable(b) {
                char::from_u32(b).unwrap()
            } else {
                next += 1;
                char::from_u32(next - 1).unwrap()
            }
        })
        .collect()
}

/// A byte-level BPE (GPT-2 / Llama 3 / Qwen style): ids 0..256 are bytes, then a few merges,
/// then `<s>` (the BOS the template adds) and `</s>`. Returns the JSON and its id count.
pub fn byte_level_json() -> (Value, u32) {
    let mut vocab = serde_json::Map::new();
    for (id, c) in byte_level_chars().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(id));
    }
    let merges = [("Ġ", "w"), ("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o")];
    for (a, b) in merges {
        let id = vocab.len();
        vocab.insert(format!("{a}{b}"), json!(id));
    }
    let bos = vocab.len() as u32;
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(bos, "<s>"), added(bos + 1, "</s>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": template("<s>", bos),
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
            "ignore_merges": false, "vocab": vocab,
            "merges": merges.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
        },
    });
    (tokenizer, bos + 2)
}

/// A SentencePiece-style BPE with byte fallback (Llama 2 / Gemma style): `<unk> <s> </s>`,
/// the 256 `<0xXX>` byte tokens, and a few pieces. Returns the JSON and its id count.
pub fn byte_fallback_json() -> (Value, u32) {
    let mut vocab = serde_json::Map::new();
    for t in ["<unk>", "<s>", "</s>"] {
        let id = vocab.len();
        vocab.insert(t.to_string(), json!(id));
    }
    for b in 0..256 {
        let id = vocab.len();
        vocab.insert(format!("<0x{b:02X}>"), json!(id));
    }
    for t in ["▁", "h", "i", "▁h", "▁hi"] {
        let id = vocab.len();
        vocab.insert(t.to_string(), json!(id));
    }
    let count = vocab.len() as u32;
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ]},
        "pre_tokenizer": null,
        "post_processor": template("<s>", 1),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true,
            "ignore_merges": false, "vocab": vocab, "merges": [["▁", "h"], ["▁h", "i"]],
        },
    });
    (tokenizer, count)
}

fn added(id: u32, content: &str) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false,
           "rstrip": false, "normalized": false, "special": true})
}

/// A post-processor that puts `bos` (with id `id`) before a single sequence.
pub fn template(bos: &str, id: u32) -> Value {
    json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [id], "tokens": [bos]}},
    })
}

/// Writes `name` as JSON into `dir`.
pub fn write_json(dir: &Path, name: &str, value: &Value) {
    std::fs::write(dir.join(name), serde_json::to_vec(value).unwrap()).unwrap();
}

/// A `tokenizers::Tokenizer` parsed from a JSON value.
pub fn parse(value: &Value) -> tokenizers::Tokenizer {
    tokenizers::Tokenizer::from_bytes(serde_json::to_vec(value).unwrap()).unwrap()
}
