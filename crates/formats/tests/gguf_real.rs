//! The real Gemma 3 270M Q4_K_M GGUF (scripts/fetch_gemma3_gguf.sh): every tensor opens and
//! dequantizes exactly as the `gguf` Python package does (fingerprints made by
//! `scripts/make_quant_golden.py --real`). Run with
//! `TF_GEMMA3_GGUF=$(scripts/fetch_gemma3_gguf.sh) cargo test -p tf-formats --test gguf_real -- --ignored --nocapture`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tf_formats::gguf::{GgufFile, MetaValue};

const FINGERPRINTS: &str = include_str!("fixtures/gguf_gemma3_270m_dequant.json");

/// Order-sensitive wrapping sum over the f32 bit patterns (as in make_quant_golden.py).
fn fingerprint(values: &[f32]) -> u64 {
    values.iter().enumerate().fold(0u64, |acc, (i, v)| {
        let weight = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        acc.wrapping_add((u64::from(v.to_bits()) + 1).wrapping_mul(weight))
    })
}

fn real_file() -> PathBuf {
    match std::env::var_os("TF_GEMMA3_GGUF") {
        Some(p) => PathBuf::from(p),
        None => panic!("set TF_GEMMA3_GGUF to the path scripts/fetch_gemma3_gguf.sh prints"),
    }
}

fn summary(f: &GgufFile) {
    println!("version {} alignment {} data at {}", f.version(), f.alignment(), f.data_offset());
    for (k, v) in f.metadata() {
        match v {
            MetaValue::Array(a) => println!("{k}: array of {} {:?}", a.len, a.elem),
            MetaValue::Str(s) if s.len() > 80 => println!("{k}: string of {} bytes", s.len()),
            v => println!("{k}: {v:?}"),
        }
    }
    let mut patterns: BTreeMap<(String, String, Vec<usize>), usize> = BTreeMap::new();
    for t in f.tensors() {
        let name = t.name.split('.').map(|p| if p.parse::<usize>().is_ok() { "N" } else { p }).collect::<Vec<_>>();
        *patterns.entry((name.join("."), t.ggml_type.name().to_string(), t.shape.clone())).or_default() += 1;
    }
    for ((name, ty, shape), n) in patterns {
        println!("{n:>3} x {name} {ty} {shape:?}");
    }
}

#[test]
#[ignore = "needs the real GGUF: set TF_GEMMA3_GGUF (scripts/fetch_gemma3_gguf.sh)"]
fn gemma3_270m_dequantizes_like_gguf_python() {
    let f = GgufFile::open(&real_file()).unwrap();
    summary(&f);
    assert_eq!(f.architecture().unwrap(), "gemma3");
    let expected: BTreeMap<String, Value> = serde_json::from_str(FINGERPRINTS).unwrap();
    assert_eq!(f.tensors().len(), expected.len());
    for (name, want) in &expected {
        let t = f.tensor(name).unwrap().unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(Some(t.dtype.name()), want["type"].as_str(), "{name}");
        let values = t.to_f32();
        assert_eq!(values.len(), t.numel(), "{name}");
        let first: Vec<f32> = values.iter().take(4).copied().collect();
        let want_first: Vec<f32> =
            want["first"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect();
        assert_eq!(first, want_first, "{name}");
        assert_eq!(format!("{:016x}", fingerprint(&values)), want["fingerprint"].as_str().unwrap(), "{name}");
    }
    println!("{} tensors dequantize bit-identically to gguf-py", expected.len());
}
