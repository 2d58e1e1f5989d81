//! Fuzzes the GGUF reader: any bytes must give a `GgufFile` or a `FormatError`, never a panic,
//! and every accessor on an accepted file must stay inside it.
//! Seeds: crates/formats/tests/corpus/gguf (`scripts/fuzz.sh` runs it as CI does).

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tf_formats::gguf::{GgufFile, MetaValue};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_bytes(Path::new("fuzz.gguf"), data.to_vec()) else { return };
    let _ = f.architecture();
    let keys: Vec<(String, bool)> =
        f.metadata().map(|(k, v)| (k.to_string(), matches!(v, MetaValue::Array(_)))).collect();
    for (key, is_array) in keys {
        let _ = (f.get_str(&key), f.get_u64(&key), f.get_f32(&key), f.get_bool(&key));
        if is_array {
            let _ = (f.get_str_array(&key), f.get_f32_array(&key), f.get_i32_array(&key));
        }
    }
    for t in f.tensors() {
        if let Ok(Some(view)) = f.tensor(&t.name) {
            assert_eq!(view.data.as_bytes().len(), t.range.len());
            let _ = view.to_f32();
        }
    }
});
