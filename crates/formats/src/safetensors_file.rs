//! A memory-mapped safetensors file with a bounded, fully validated header.

use crate::bytes::TensorBytes;
use crate::error::FormatError;
use memmap2::Mmap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tf_core::DType;

/// Headers larger than this are refused (the reference implementation's limit).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// One tensor's entry in the header.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    /// Element type, or the unsupported safetensors name.
    pub dtype: Result<DType, String>,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Byte range inside the data section.
    pub begin: usize,
    /// End of the byte range (exclusive).
    pub end: usize,
}

/// A tensor ready to use: checked dtype, shape and bytes.
#[derive(Clone, Debug)]
pub struct TensorView {
    /// Tensor name in the checkpoint.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Raw bytes (little endian).
    pub data: TensorBytes,
    /// The file it came from.
    pub file: PathBuf,
}

impl TensorView {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements as f32.
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.to_f32(self.dtype)
    }
}

/// An open safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    map: Arc<Mmap>,
    data_start: usize,
    tensors: BTreeMap<String, TensorInfo>,
    metadata: BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// Maps `path` and validates its header and every tensor's offsets.
    pub fn open(path: &Path) -> Result<SafetensorsFile, FormatError> {
        let io = |source| FormatError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file changed under us can give wrong numbers but
        // every offset used is bounds-checked against the map's length at open time.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (data_start, tensors, metadata) = parse_header(path, &map)?;
        Ok(SafetensorsFile { path: path.to_path_buf(), map: Arc::new(map), data_start, tensors, metadata })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names and entries, sorted by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    /// The free-form `__metadata__` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The named tensor, or `None` when absent; unsupported dtypes are an error.
    pub fn tensor(&self, name: &str) -> Result<Option<TensorView>, FormatError> {
        let Some(info) = self.tensors.get(name) else { return Ok(None) };
        let dtype =
            info.dtype.clone().map_err(|d| FormatError::tensor(&self.path, name, format!("unsupported dtype {d}")))?;
        let range = self.data_start + info.begin..self.data_start + info.end;
        Ok(Some(TensorView {
            name: name.to_string(),
            dtype,
            shape: info.shape.clone(),
            data: TensorBytes::Mapped(self.map.clone(), range),
            file: self.path.clone(),
        }))
    }
}

type Parsed = (usize, BTreeMap<String, TensorInfo>, BTreeMap<String, String>);

fn parse_header(path: &Path, buf: &[u8]) -> Result<Parsed, FormatError> {
    let bad = |msg: String| FormatError::header(path, msg);
    if buf.len() < 8 {
        return Err(bad(format!("file is {} bytes, shorter than the 8-byte length prefix", buf.len())));
    }
    let header_len = u64::from_le_bytes(buf[..8].try_into().map_err(|_| bad("short prefix".into()))?);
    if header_len > MAX_HEADER_BYTES {
        return Err(bad(format!("header length {header_len} exceeds the {MAX_HEADER_BYTES}-byte limit")));
    }
    let data_start = 8 + header_len as usize;
    if data_start > buf.len() {
        return Err(bad(format!("header length {header_len} runs past the end of the {}-byte file", buf.len())));
    }
    let text = std::str::from_utf8(&buf[8..data_start]).map_err(|e| bad(format!("header is not UTF-8: {e}")))?;
    let root: Value =
        serde_json::from_str(text.trim_end_matches(' ')).map_err(|e| bad(format!("header is not JSON: {e}")))?;
    let Value::Object(entries) = root else { return Err(bad("header is not a JSON object".into())) };
    let data_len = buf.len() - data_start;
    let mut tensors = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (name, entry) in entries {
        if name == "__metadata__" {
            if let Value::Object(m) = entry {
                for (k, v) in m {
                    if let Value::String(s) = v {
                        metadata.insert(k, s);
                    }
                }
            }
            continue;
        }
        let info = parse_entry(&entry, data_len).map_err(|msg| FormatError::tensor(path, &name, msg))?;
        tensors.insert(name, info);
    }
    check_overlaps(path, &tensors)?;
    Ok((data_start, tensors, metadata))
}

fn parse_entry(entry: &Value, data_len: usize) -> Result<TensorInfo, String> {
    let dtype_name = entry.get("dtype").and_then(Value::as_str).ok_or("missing dtype")?;
    let dtype = match dtype_name {
        "F32" => Ok(DType::F32),
        "F16" => Ok(DType::F16),
        "BF16" => Ok(DType::BF16),
        "I64" => Ok(DType::I64),
        other => Err(other.to_string()),
    };
    let shape = entry
        .get("shape")
        .and_then(Value::as_array)
        .ok_or("missing shape")?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()).ok_or("shape has a non-integer dimension"))
        .collect::<Result<Vec<usize>, _>>()?;
    let offsets = entry.get("data_offsets").and_then(Value::as_array).ok_or("missing data_offsets")?;
    let [begin, end] = offsets.as_slice() else { return Err("data_offsets must have two entries".into()) };
    let as_off = |v: &Value| v.as_u64().and_then(|d| usize::try_from(d).ok()).ok_or("data_offsets are not integers");
    let (begin, end) = (as_off(begin)?, as_off(end)?);
    if begin > end || end > data_len {
        return Err(format!("data_offsets [{begin}, {end}] fall outside the {data_len}-byte data section"));
    }
    let numel = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or("element count overflows")?;
    let elem = match dtype {
        Ok(d) => d.size(),
        Err(ref name) => safetensors_size(name).ok_or_else(|| format!("unknown dtype {name}"))?,
    };
    let nbytes = numel.checked_mul(elem).ok_or("byte count overflows")?;
    if end - begin != nbytes {
        return Err(format!("shape {shape:?} needs {nbytes} bytes but data_offsets span {}", end - begin));
    }
    Ok(TensorInfo { dtype, shape, begin, end })
}

fn safetensors_size(name: &str) -> Option<usize> {
    Some(match name {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "I16" | "U16" => 2,
        "I32" | "U32" => 4,
        "U64" | "F64" => 8,
        _ => return None,
    })
}

fn check_overlaps(path: &Path, tensors: &BTreeMap<String, TensorInfo>) -> Result<(), FormatError> {
    let mut spans: Vec<(usize, usize, &str)> =
        tensors.iter().filter(|(_, t)| t.end > t.begin).map(|(n, t)| (t.begin, t.end, n.as_str())).collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(FormatError::tensor(path, pair[1].2, format!("data overlaps tensor '{}'", pair[0].2)));
        }
    }
    Ok(())
}
