//! GGUF reader: valid files written by the test writer read back exactly; a corpus of corrupted
//! files (SECURITY-CASES.md item 14) is refused with a `FormatError`, never a panic.

use std::path::{Path, PathBuf};
use tf_core::{DType, QuantType};
use tf_formats::FormatError;
use tf_formats::gguf::writer::{GgufWriter, WriteTensor, WriteValue, ggml_ne};
use tf_formats::gguf::{GgufFile, MetaValue, ValueType};

const NAME: &str = "test.gguf";

fn open(bytes: Vec<u8>) -> Result<GgufFile, FormatError> {
    GgufFile::from_bytes(Path::new(NAME), bytes)
}

fn refused(bytes: Vec<u8>) -> FormatError {
    match open(bytes) {
        Ok(_) => panic!("a corrupted file was accepted"),
        Err(e) => e,
    }
}

/// The tensor a tensor-level error names.
fn tensor_of(e: &FormatError) -> Option<&str> {
    match e {
        FormatError::Tensor { name, .. } => Some(name),
        _ => None,
    }
}

fn q4k_block(seed: u8) -> Vec<u8> {
    (0..144u32).map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed)).collect()
}

/// A valid file using every metadata type and several tensor types.
fn sample() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", WriteValue::str("llama"))
        .kv("t.u8", WriteValue::U8(200))
        .kv("t.i8", WriteValue::I8(-5))
        .kv("t.u16", WriteValue::U16(60000))
        .kv("t.i16", WriteValue::I16(-300))
        .kv("t.u32", WriteValue::U32(4_000_000_000))
        .kv("t.i32", WriteValue::I32(-7))
        .kv("t.f32", WriteValue::F32(0.25))
        .kv("t.bool", WriteValue::Bool(true))
        .kv("t.u64", WriteValue::U64(1 << 40))
        .kv("t.i64", WriteValue::I64(12))
        .kv("t.f64", WriteValue::F64(1e-6))
        .kv("t.strs", WriteValue::strs(&["a", "", "ünï"]))
        .kv("t.f32s", WriteValue::f32s(&[1.5, -2.0]))
        .kv("t.i32s", WriteValue::i32s(&[3, -4, 5]))
        .kv("t.u8s", WriteValue::Array(ValueType::U8, vec![WriteValue::U8(1), WriteValue::U8(255)]))
        .kv("t.nested", WriteValue::Array(ValueType::Array, vec![WriteValue::strs(&["x"]), WriteValue::i32s(&[])]))
        .f32_tensor("a", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .f16_tensor("b", &[4], &[0.5, -1.0, 2.0, 3.0])
        .bf16_tensor("c", &[1, 2], &[1.0, -8.0])
        .tensor("q", &[256, 2], 12, [q4k_block(1), q4k_block(2)].concat());
    w
}

#[test]
fn valid_file_reads_back() {
    let f = open(sample().to_bytes()).unwrap();
    assert_eq!((f.version(), f.alignment()), (3, 32));
    assert_eq!(f.architecture().unwrap(), "llama");
    assert_eq!(f.get_u64("t.u8").unwrap(), Some(200));
    assert_eq!(f.get_u64("t.u16").unwrap(), Some(60000));
    assert_eq!(f.get_u64("t.u32").unwrap(), Some(4_000_000_000));
    assert_eq!(f.get_u64("t.u64").unwrap(), Some(1 << 40));
    assert_eq!(f.get_u64("t.i64").unwrap(), Some(12));
    assert_eq!(f.get("t.i8"), Some(&MetaValue::I8(-5)));
    assert_eq!(f.get("t.i16"), Some(&MetaValue::I16(-300)));
    assert_eq!(f.get_f32("t.f32").unwrap(), Some(0.25));
    assert_eq!(f.get_f32("t.f64").unwrap(), Some(1e-6));
    assert_eq!(f.get_f32("t.u8").unwrap(), Some(200.0));
    assert_eq!(f.get_bool("t.bool").unwrap(), Some(true));
    assert_eq!(f.get_str_array("t.strs").unwrap().unwrap(), vec!["a", "", "ünï"]);
    assert_eq!(f.get_f32_array("t.f32s").unwrap().unwrap(), vec![1.5, -2.0]);
    assert_eq!(f.get_i32_array("t.i32s").unwrap().unwrap(), vec![3, -4, 5]);
    assert_eq!(f.get_i32_array("t.u8s").unwrap().unwrap(), vec![1, 255]);
    assert!(matches!(f.get("t.nested"), Some(MetaValue::Array(a)) if a.len == 2 && a.elem == ValueType::Array));
    assert_eq!(f.get_str("missing").unwrap(), None);
    assert_eq!(f.metadata().count(), 17);

    let a = f.tensor("a").unwrap().unwrap();
    assert_eq!((a.dtype, a.shape.clone()), (DType::F32, vec![2, 3]));
    assert_eq!(a.to_f32(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f.tensor("b").unwrap().unwrap();
    assert_eq!((b.dtype, b.to_f32()), (DType::F16, vec![0.5, -1.0, 2.0, 3.0]));
    let c = f.tensor("c").unwrap().unwrap();
    assert_eq!((c.dtype, c.shape.clone(), c.to_f32()), (DType::BF16, vec![1, 2], vec![1.0, -8.0]));
    let q = f.tensor("q").unwrap().unwrap();
    assert_eq!((q.dtype, q.shape.clone()), (DType::Quant(QuantType::Q4K), vec![2, 256]));
    assert_eq!(q.data.as_bytes(), [q4k_block(1), q4k_block(2)].concat().as_slice());
    assert!(f.tensor("nope").unwrap().is_none());
    for t in f.tensors() {
        assert!(t.range.start.is_multiple_of(32), "{} at {}", t.name, t.range.start);
    }
}

#[test]
fn mapped_file_matches_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    std::fs::write(&path, sample().to_bytes()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let t = f.tensor("a").unwrap().unwrap();
    assert_eq!((t.file.as_path(), t.to_f32()), (path.as_path(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert!(matches!(GgufFile::open(&dir.path().join("absent.gguf")), Err(FormatError::Io { .. })));
}

#[test]
fn version_2_and_custom_alignment() {
    let mut w = sample();
    w.version = 2;
    w.alignment = 64;
    w.kv("general.alignment", WriteValue::U32(64));
    let f = open(w.to_bytes()).unwrap();
    assert_eq!((f.version(), f.alignment()), (2, 64));
    assert!(f.data_offset().is_multiple_of(64));
    assert_eq!(f.tensor("b").unwrap().unwrap().to_f32(), vec![0.5, -1.0, 2.0, 3.0]);
}

#[test]
fn wrong_metadata_types_are_errors() {
    let f = open(sample().to_bytes()).unwrap();
    assert!(f.get_u64("t.i32").is_err(), "negative value as u64");
    assert!(f.get_str("t.u32").is_err());
    assert!(f.get_bool("t.u8").is_err());
    assert!(f.get_f32("t.strs").is_err());
    assert!(f.get_str_array("t.f32s").is_err());
    assert!(f.get_f32_array("t.strs").is_err());
    assert!(f.get_i32_array("t.nested").is_err());
    assert!(f.get_str_array("t.u8").is_err(), "scalar read as array");
    let mut w = GgufWriter::new();
    w.kv("big", WriteValue::Array(ValueType::U32, vec![WriteValue::U32(u32::MAX)]));
    assert!(open(w.to_bytes()).unwrap().get_i32_array("big").is_err(), "u32 past i32 range");
    assert!(open(GgufWriter::new().to_bytes()).unwrap().architecture().is_err());
}

#[test]
fn arrays_nest_three_deep() {
    let mut w = GgufWriter::new();
    w.kv("deep", nested(2));
    assert!(matches!(open(w.to_bytes()).unwrap().get("deep"), Some(MetaValue::Array(a)) if a.len == 1));
}

#[test]
fn known_but_unsupported_type_is_refused_on_access_by_name() {
    let mut w = GgufWriter::new();
    w.tensor("blk.0.iq", &[256], 23, vec![0; 136]); // IQ4_XS
    let f = open(w.to_bytes()).unwrap();
    let e = f.tensor("blk.0.iq").unwrap_err();
    assert_eq!(tensor_of(&e), Some("blk.0.iq"), "{e}");
    assert!(e.to_string().contains("iq4_xs"), "{e}");
}

// ---- corrupted files --------------------------------------------------------------------

fn header(version: u32, n_tensors: u64, n_kvs: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kvs.to_le_bytes());
    b
}

fn with_tensor(ne: &[u64], ggml_type: u32, data: Vec<u8>, offset: Option<u64>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.tensors.push(WriteTensor { name: "bad.weight".into(), ne: ne.to_vec(), ggml_type, data, offset });
    w.to_bytes()
}

fn nested(depth: usize) -> WriteValue {
    (0..depth).fold(WriteValue::i32s(&[1]), |inner, _| WriteValue::Array(ValueType::Array, vec![inner]))
}

/// Each corrupted file with the tensor its error must name, if any.
fn corpus() -> Vec<(&'static str, Vec<u8>, Option<&'static str>)> {
    let valid = sample().to_bytes();
    let mut cases: Vec<(&str, Vec<u8>, Option<&str>)> = Vec::new();
    let mut bad_magic = valid.clone();
    bad_magic[..4].copy_from_slice(b"GGML");
    cases.push(("bad magic", bad_magic, None));
    cases.push(("empty", Vec::new(), None));
    for (name, v) in [("version 1", 1u32), ("version 99", 99), ("version 0", 0)] {
        let mut b = valid.clone();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        cases.push((name, b, None));
    }
    let mut big_endian = valid.clone();
    big_endian[4..8].copy_from_slice(&3u32.to_be_bytes());
    cases.push(("big-endian version", big_endian, None));
    cases.push(("tensor count 2^63", header(3, 1 << 63, 0), None));
    cases.push(("tensor count past the bytes", header(3, 1000, 0), None));
    cases.push(("kv count 2^64-1", header(3, 0, u64::MAX), None));
    let mut key_past_end = header(3, 0, 1);
    key_past_end.extend(1000u64.to_le_bytes());
    key_past_end.extend(b"general.arch");
    cases.push(("key length past the end", key_past_end, None));
    let mut key_too_long = header(3, 0, 1);
    key_too_long.extend(1_000_000u64.to_le_bytes());
    key_too_long.extend(vec![b'k'; 1_000_000]);
    cases.push(("key longer than 65535", key_too_long, None));
    let mut value_past_end = header(3, 0, 1);
    value_past_end.extend(1u64.to_le_bytes());
    value_past_end.push(b'k');
    value_past_end.extend(8u32.to_le_bytes());
    value_past_end.extend(u64::MAX.to_le_bytes());
    value_past_end.extend([b'x'; 32]);
    cases.push(("string value length 2^64-1", value_past_end, None));
    for (name, len) in [("array length 2^62", 1u64 << 62), ("array length past the bytes", 1000)] {
        let mut b = header(3, 0, 1);
        b.extend(1u64.to_le_bytes());
        b.push(b'k');
        b.extend(9u32.to_le_bytes());
        b.extend(4u32.to_le_bytes());
        b.extend(len.to_le_bytes());
        b.extend([0u8; 64]);
        cases.push((name, b, None));
    }
    let mut w = GgufWriter::new();
    w.kv("deep", nested(5));
    cases.push(("arrays nested 6 deep", w.to_bytes(), None));
    let mut unknown_value = header(3, 0, 1);
    unknown_value.extend(1u64.to_le_bytes());
    unknown_value.push(b'k');
    unknown_value.extend(13u32.to_le_bytes());
    unknown_value.extend([0u8; 16]);
    cases.push(("unknown metadata type", unknown_value, None));
    let mut bad_key = header(3, 0, 1);
    bad_key.extend(2u64.to_le_bytes());
    bad_key.extend([0xC3, 0x28]);
    bad_key.extend(4u32.to_le_bytes());
    bad_key.extend(7u32.to_le_bytes());
    cases.push(("key not UTF-8", bad_key, None));
    let mut dup = GgufWriter::new();
    dup.kv("k", WriteValue::U32(1)).kv("k", WriteValue::U32(2));
    cases.push(("duplicate key", dup.to_bytes(), None));
    for (name, v) in [("alignment 48", WriteValue::U32(48)), ("alignment 0", WriteValue::U32(0))] {
        let mut w = sample();
        w.kv("general.alignment", v);
        cases.push((name, w.to_bytes(), None));
    }
    let mut w = sample();
    w.kv("general.alignment", WriteValue::U64(1 << 40));
    cases.push(("alignment 2^40", w.to_bytes(), None));
    let mut w = sample();
    w.kv("general.alignment", WriteValue::str("32"));
    cases.push(("alignment not a number", w.to_bytes(), None));
    cases.push(("unknown ggml type", with_tensor(&[4], 99, vec![0; 16], None), Some("bad.weight")));
    cases.push(("misaligned offset", with_tensor(&[4], 0, vec![0; 16], Some(4)), Some("bad.weight")));
    cases.push(("data past the end", with_tensor(&[4], 0, vec![0; 8], None), Some("bad.weight")));
    cases.push(("offset 2^63", with_tensor(&[4], 0, vec![0; 16], Some(1 << 63)), Some("bad.weight")));
    cases.push(("offset 2^64-32", with_tensor(&[4], 0, vec![0; 16], Some(u64::MAX - 31)), Some("bad.weight")));
    let huge = 1u64 << 32;
    cases.push(("overflowing dims", with_tensor(&[huge, huge, huge], 0, vec![0; 16], None), Some("bad.weight")));
    cases.push(("overflowing bytes", with_tensor(&[1 << 62], 0, vec![0; 16], None), Some("bad.weight")));
    cases.push(("dim 2^63", with_tensor(&[1 << 63], 0, vec![0; 16], None), Some("bad.weight")));
    cases.push(("zero dim", with_tensor(&[4, 0], 0, vec![0; 16], None), Some("bad.weight")));
    cases.push(("n_dims 5", with_tensor(&[1, 1, 1, 1, 4], 0, vec![0; 16], None), Some("bad.weight")));
    cases.push(("n_dims 0", with_tensor(&[], 0, vec![0; 4], None), Some("bad.weight")));
    cases.push(("partial quant block", with_tensor(&[128, 2], 12, vec![0; 144], None), Some("bad.weight")));
    let mut overlap = GgufWriter::new();
    overlap.tensor("first", &[8], 0, vec![0; 32]);
    overlap.tensors.push(WriteTensor {
        name: "second".into(),
        ne: vec![8],
        ggml_type: 0,
        data: vec![0; 32],
        offset: Some(0),
    });
    cases.push(("overlapping tensors", overlap.to_bytes(), Some("second")));
    let mut twice = GgufWriter::new();
    twice.tensor("same", &[8], 0, vec![0; 32]).tensor("same", &[8], 0, vec![0; 32]);
    cases.push(("duplicate tensor name", twice.to_bytes(), Some("same")));
    let mut long = GgufWriter::new();
    long.tensor(&"x".repeat(2000), &[8], 0, vec![0; 32]);
    cases.push(("tensor name too long", long.to_bytes(), None));
    cases
}

#[test]
fn corrupted_files_are_refused() {
    for (what, bytes, tensor) in corpus() {
        let result = std::panic::catch_unwind(|| open(bytes));
        let e = match result {
            Ok(Ok(_)) => panic!("{what}: accepted"),
            Ok(Err(e)) => e,
            Err(_) => panic!("{what}: panicked"),
        };
        eprintln!("{what}: {e}");
        assert!(e.to_string().contains(NAME), "{what}: error does not name the file: {e}");
        if let Some(name) = tensor {
            assert_eq!(tensor_of(&e), Some(name), "{what}: {e}");
        }
    }
}

#[test]
fn truncated_files_are_refused() {
    let valid = sample().to_bytes();
    for len in (0..valid.len()).step_by(7) {
        let e = refused(valid[..len].to_vec());
        assert!(e.to_string().contains(NAME), "prefix {len}: {e}");
    }
}

#[test]
fn tensor_names_are_in_errors() {
    let e = refused(with_tensor(&[4], 0, vec![0; 16], Some(4)));
    assert!(e.to_string().contains("bad.weight") && e.to_string().contains("alignment"), "{e}");
}

// ---- the fuzz seed corpus ---------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/gguf")
}

/// Small files for the fuzz seed corpus: one valid file and a few corrupted ones.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut small = GgufWriter::new();
    small
        .kv("general.architecture", WriteValue::str("llama"))
        .kv("llama.block_count", WriteValue::U32(1))
        .kv("tokenizer.ggml.tokens", WriteValue::strs(&["<s>", "a"]))
        .kv("tokenizer.ggml.scores", WriteValue::f32s(&[0.0, -1.0]))
        .f32_tensor("token_embd.weight", &[2, 4], &[0.5; 8])
        .tensor("blk.0.attn_q.weight", &ggml_ne(&[1, 32]), 8, vec![0x3c; 34]);
    let mut seeds = vec![("valid_small.gguf".to_string(), small.to_bytes())];
    let keep = [
        "bad magic",
        "version 1",
        "tensor count 2^63",
        "string value length 2^64-1",
        "array length 2^62",
        "arrays nested 6 deep",
        "unknown ggml type",
        "misaligned offset",
        "data past the end",
        "overflowing dims",
    ];
    for (what, bytes, _) in corpus() {
        if keep.contains(&what) {
            seeds.push((format!("bad_{}.gguf", what.replace([' ', '^'], "_")), bytes));
        }
    }
    seeds
}

/// Rewrites tests/corpus/gguf (run with `cargo test -p tf-formats --test gguf_reader -- --ignored`).
#[test]
#[ignore = "rewrites the committed fuzz seed corpus"]
fn write_seed_corpus() {
    std::fs::create_dir_all(corpus_dir()).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(corpus_dir().join(name), bytes).unwrap();
    }
}

#[test]
fn seed_corpus_is_current_and_judged_by_name() {
    for (name, bytes) in seeds() {
        let on_disk = std::fs::read(corpus_dir().join(&name)).unwrap();
        assert_eq!(on_disk, bytes, "{name} is stale: run the ignored write_seed_corpus test");
        let ok = GgufFile::open(&corpus_dir().join(&name)).is_ok();
        assert_eq!(ok, name.starts_with("valid_"), "{name}");
    }
}

#[test]
fn file_controlled_keys_are_escaped_and_cut_in_errors() {
    let key = format!("a\u{1b}[2J\0{}", "k".repeat(1000));
    let mut w = GgufWriter::new();
    w.kv(&key, WriteValue::U32(1)).kv(&key, WriteValue::U32(2));
    let err = GgufFile::from_bytes(Path::new("dup.gguf"), w.to_bytes()).err().expect("refused").to_string();
    assert!(err.contains(r"metadata key 'a\x1b[2J\x00kkk") && err.contains("...' appears twice"), "{err}");
    assert!(!err.chars().any(char::is_control), "{err:?}");
    assert!(err.len() < 300, "not cut: {} bytes", err.len());
}
