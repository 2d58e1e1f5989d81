//! Fuzzes the safetensors header rules: any bytes must give a `SafetensorsFile` or a
//! `FormatError`, never a panic; an accepted file is one the reference library accepts too, its
//! tensors tile the data section exactly, and every tensor reads back inside it; `printable`
//! of any bytes holds no control character.
//! Seeds: crates/formats/tests/corpus/safetensors (`scripts/fuzz.sh` runs it as CI does).

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tf_formats::{SafetensorsFile, printable};

fuzz_target!(|data: &[u8]| {
    let shown = printable(data, 64);
    assert!(!shown.chars().any(char::is_control) && shown.chars().count() <= 67, "printable let {shown:?} by");
    let Ok(f) = SafetensorsFile::from_bytes(Path::new("fuzz.safetensors"), data.to_vec()) else { return };
    assert!(safetensors::SafeTensors::deserialize(data).is_ok(), "accepted a file the reference refuses");
    let header_len = u64::from_le_bytes(data[..8].try_into().unwrap_or_default()) as usize;
    let data_len = data.len() - 8 - header_len;
    let mut spans: Vec<(usize, usize)> = f.tensors().values().map(|t| (t.begin, t.end)).collect();
    spans.sort_unstable();
    let mut covered = 0;
    for (begin, end) in spans {
        assert_eq!(begin, covered, "a gap or an overlap was accepted");
        covered = end;
    }
    assert_eq!(covered, data_len, "trailing bytes were accepted");
    for (name, info) in f.tensors() {
        if let Ok(Some(view)) = f.tensor(name) {
            assert_eq!(view.data.as_bytes().len(), info.end - info.begin);
            assert_eq!(view.data.as_bytes(), &data[8 + header_len + info.begin..8 + header_len + info.end]);
            let _ = view.to_f32();
        }
    }
});
