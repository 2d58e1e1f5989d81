//! The safetensors header rules, as strict as the reference library's `read_metadata` and
//! `validate` and its format spec: a bounded length, a JSON object that begins with `{` and is
//! padded with spaces only, names given once, `__metadata__` string to string, and tensors whose
//! byte ranges, sorted by offset, tile the data section exactly (no gap, overlap or trailing byte).

use crate::error::FormatError;
use crate::printable::show;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;
use tf_core::DType;

/// Headers longer than this are refused (the reference library's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor's entry in the header.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Element type, or the safetensors name of a type TensorFold does not compute in.
    pub dtype: Result<DType, String>,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Byte range inside the data section.
    pub begin: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
}

/// A validated header.
#[derive(Clone, Debug)]
pub struct Header {
    /// File offset of the data section (8 + the header length).
    pub data_start: usize,
    /// Tensor entries by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    /// The free-form `__metadata__` map.
    pub metadata: BTreeMap<String, String>,
}

/// Validates `buf`, a whole safetensors file named `path` in errors.
pub fn parse_header(path: &Path, buf: &[u8]) -> Result<Header, FormatError> {
    let bad = |msg: String| FormatError::header(path, msg);
    let Some((prefix, rest)) = buf.split_first_chunk::<8>() else {
        return Err(bad(format!("file is {} bytes, shorter than the 8-byte length prefix", buf.len())));
    };
    let header_len = u64::from_le_bytes(*prefix);
    if header_len > MAX_HEADER_BYTES {
        return Err(bad(format!("header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit")));
    }
    let Some(text) = rest.get(..header_len as usize) else {
        return Err(bad(format!("header length {header_len} runs past the end of the {}-byte file", buf.len())));
    };
    let text = std::str::from_utf8(text).map_err(|e| bad(format!("header is not UTF-8: {e}")))?;
    if !text.starts_with('{') {
        return Err(bad("header is not a JSON object: it must begin with '{'".into()));
    }
    let json = text.trim_end_matches(' ');
    if !json.ends_with('}') {
        return Err(bad("header JSON must end with '}' followed only by space padding".into()));
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let entries = Entries::deserialize(&mut de)
        .and_then(|e| de.end().map(|()| e))
        .map_err(|e| bad(format!("header is not JSON of the safetensors form: {e}")))?;
    let data_len = rest.len() - text.len();
    let mut tensors = BTreeMap::new();
    for (name, raw) in entries.tensors {
        let info = check_entry(raw, data_len).map_err(|msg| FormatError::tensor(path, &name, msg))?;
        tensors.insert(name, info);
    }
    check_tiling(path, &tensors, data_len)?;
    Ok(Header { data_start: 8 + text.len(), tensors, metadata: entries.metadata.unwrap_or_default() })
}

/// An entry as written (the reference's `TensorInfo`: duplicate fields refused, others ignored).
#[derive(Deserialize)]
struct RawEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// The header object, each name once.
struct Entries {
    metadata: Option<BTreeMap<String, String>>,
    tensors: Vec<(String, RawEntry)>,
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        d.deserialize_map(EntriesVisitor)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
        let mut seen = HashSet::new();
        let mut out = Entries { metadata: None, tensors: Vec::new() };
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                return Err(de::Error::custom(format!("'{}' appears twice", show(&name))));
            }
            let context = |e: A::Error| de::Error::custom(format!("'{}': {e}", show(&name)));
            if name == "__metadata__" {
                out.metadata = map.next_value().map_err(context)?;
            } else {
                out.tensors.push((name.clone(), map.next_value().map_err(context)?));
            }
        }
        Ok(out)
    }
}

fn check_entry(raw: RawEntry, data_len: usize) -> Result<TensorInfo, String> {
    let dtype = match raw.dtype.as_str() {
        "F32" => Ok(DType::F32),
        "F16" => Ok(DType::F16),
        "BF16" => Ok(DType::BF16),
        "F8_E4M3" => Ok(DType::F8E4M3),
        "I64" => Ok(DType::I64),
        "U8" => Ok(DType::U8),
        other => Err(other.to_string()),
    };
    let bits = match &dtype {
        Ok(d) => d.size() * 8,
        Err(name) => bit_size(name).ok_or_else(|| format!("unknown dtype '{}'", show(name)))?,
    };
    let shape = raw
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("dimension {d} does not fit in memory")))
        .collect::<Result<Vec<usize>, _>>()?;
    let (begin, end) = raw.data_offsets;
    let range = usize::try_from(begin).ok().zip(usize::try_from(end).ok()).filter(|&(b, e)| b <= e && e <= data_len);
    let Some((begin, end)) = range else {
        return Err(format!("data_offsets [{begin}, {end}] fall outside the {data_len}-byte data section"));
    };
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or("element count overflows")?;
    let nbits = numel.checked_mul(bits).ok_or("byte count overflows")?;
    if !nbits.is_multiple_of(8) {
        return Err(format!("{numel} elements of {bits} bits do not end on a byte boundary"));
    }
    if end - begin != nbits / 8 {
        return Err(format!("shape {shape:?} needs {} bytes but data_offsets span {}", nbits / 8, end - begin));
    }
    Ok(TensorInfo { dtype, shape, begin, end })
}

/// Bits per element of the other safetensors dtypes (the reference's `Dtype::bitsize`).
fn bit_size(name: &str) -> Option<usize> {
    Some(match name {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" => 16,
        "I32" | "U32" => 32,
        "U64" | "F64" => 64,
        _ => return None,
    })
}

/// Sorted by (begin, end) as the reference sorts them, the ranges must follow each other from
/// byte 0 and end exactly at the end of the file. An overlap is named before a gap it leaves.
fn check_tiling(path: &Path, tensors: &BTreeMap<String, TensorInfo>, data_len: usize) -> Result<(), FormatError> {
    let mut spans: Vec<(usize, usize, &str)> = tensors.iter().map(|(n, t)| (t.begin, t.end, n.as_str())).collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, prev_end, prev), (begin, _, name)) = (pair[0], pair[1]);
        if begin < prev_end {
            return Err(FormatError::tensor(path, name, format!("data overlaps tensor '{}'", show(prev))));
        }
    }
    let mut covered = 0usize;
    for &(begin, end, name) in &spans {
        if begin > covered {
            let msg = format!("data starts at {begin}, leaving bytes {covered}..{begin} of the data section unused");
            return Err(FormatError::tensor(path, name, msg));
        }
        covered = end;
    }
    if covered != data_len {
        return Err(FormatError::header(
            path,
            format!(
                "the {data_len}-byte data section has {} bytes past its last tensor (offsets must cover it exactly; \
                 is the header length right?)",
                data_len - covered
            ),
        ));
    }
    Ok(())
}
