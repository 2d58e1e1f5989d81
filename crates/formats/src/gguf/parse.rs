//! Bounded parsing of a GGUF header (llama.cpp's `gguf.cpp` layout, v2 and v3): every count
//! and length is checked against the bytes left in the file and a fixed cap before it is used.

use super::{GgmlType, MetaArray, MetaValue, TensorEntry, ValueType};
use crate::error::FormatError;
use crate::printable::show;
use std::collections::HashMap;
use std::path::Path;

/// Most tensors a file may declare.
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata entries a file may declare.
pub const MAX_KVS: u64 = 1 << 20;
/// Longest metadata key (GGUF's own limit).
pub const MAX_KEY_BYTES: u64 = 65_535;
/// Longest tensor name.
pub const MAX_TENSOR_NAME_BYTES: u64 = 1024;
/// Longest string value.
pub const MAX_STRING_BYTES: u64 = 1 << 30;
/// Most elements of one array.
pub const MAX_ARRAY_LEN: u64 = 1 << 28;
/// Deepest nesting of arrays inside arrays (an array of scalars is depth 1).
pub const MAX_ARRAY_DEPTH: usize = 3;
/// Largest `general.alignment` accepted.
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// Alignment of the data section when the file names none.
pub const DEFAULT_ALIGNMENT: usize = 32;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// A read position over the file's bytes; every read is bounds-checked.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at `pos` of `buf`.
    pub(crate) fn new(buf: &'a [u8], pos: usize) -> Cursor<'a> {
        Cursor { buf, pos: pos.min(buf.len()) }
    }

    /// The current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let past = || format!("{n} bytes at offset {} run past the end of the {}-byte file", self.pos, self.buf.len());
        let end = self.pos.checked_add(n).ok_or_else(past)?;
        let bytes = self.buf.get(self.pos..end).ok_or_else(past)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let b = self.take(N)?;
        b.try_into().map_err(|_| format!("short read of {N} bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items at least `min_item_bytes` long each, bounded by `cap` and the bytes left.
    fn count(&mut self, what: &str, min_item_bytes: usize, cap: u64) -> Result<usize, String> {
        let at = self.pos;
        let n = self.u64()?;
        if n > cap {
            return Err(format!("{what} {n} at offset {at} exceeds the limit of {cap}"));
        }
        let fits = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(min_item_bytes.max(1)))
            .is_some_and(|bytes| bytes <= self.remaining());
        if !fits {
            return Err(format!("{what} {n} at offset {at} needs more than the {} bytes left", self.remaining()));
        }
        usize::try_from(n).map_err(|_| format!("{what} {n} does not fit in memory"))
    }

    /// A length-prefixed UTF-8 string of at most `cap` bytes.
    pub(crate) fn string(&mut self, what: &str, cap: u64) -> Result<&'a str, String> {
        let at = self.pos;
        let len = self.count(&format!("{what} length"), 1, cap)?;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|e| format!("{what} at offset {at} is not UTF-8: {e}"))
    }

    fn value_type(&mut self) -> Result<ValueType, String> {
        let at = self.pos;
        let code = self.u32()?;
        ValueType::from_code(code).ok_or_else(|| format!("unknown metadata value type {code} at offset {at}"))
    }
}

/// Everything the header declares, validated.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub meta_index: HashMap<String, usize>,
    pub alignment: usize,
    pub data_start: usize,
    pub tensors: Vec<TensorEntry>,
    pub tensor_index: HashMap<String, usize>,
}

/// Parses and validates the header of the GGUF file `buf` (named `path` in errors).
pub(crate) fn parse_header(path: &Path, buf: &[u8]) -> Result<Header, FormatError> {
    let bad = |msg: String| FormatError::header(path, msg);
    let mut c = Cursor::new(buf, 0);
    let magic = c.take(4).map_err(|_| bad(format!("file is {} bytes, too short for a GGUF header", buf.len())))?;
    if magic != b"GGUF" {
        return Err(bad(format!("bad magic {magic:02x?}, expected \"GGUF\"")));
    }
    let version = c.u32().map_err(&bad)?;
    if !(2..=3).contains(&version) {
        return Err(bad(format!("GGUF version {version} is not supported (only 2 and 3)")));
    }
    // A tensor info is at least: name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
    let n_tensors = c.count("tensor count", 32, MAX_TENSORS).map_err(&bad)?;
    // A metadata entry is at least: key length (8) + value type (4) + a one-byte value.
    let n_kvs = c.count("metadata count", 13, MAX_KVS).map_err(&bad)?;
    let mut metadata = Vec::with_capacity(n_kvs);
    let mut meta_index = HashMap::with_capacity(n_kvs);
    for i in 0..n_kvs {
        let key = c.string("metadata key", MAX_KEY_BYTES).map_err(|e| bad(format!("metadata entry {i}: {e}")))?;
        let value = read_kv_value(&mut c).map_err(|e| bad(format!("metadata '{}': {e}", show(key))))?;
        if meta_index.insert(key.to_string(), metadata.len()).is_some() {
            return Err(bad(format!("metadata key '{}' appears twice", show(key))));
        }
        metadata.push((key.to_string(), value));
    }
    let alignment = alignment(&metadata, &meta_index).map_err(&bad)?;
    let mut raw = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        raw.push(read_tensor_info(path, &mut c, i)?);
    }
    let data_start =
        c.pos().checked_next_multiple_of(alignment).ok_or_else(|| bad("data section offset overflows".into()))?;
    let mut tensors = Vec::with_capacity(n_tensors);
    let mut tensor_index = HashMap::with_capacity(n_tensors);
    for r in raw {
        let entry = place_tensor(path, r, data_start, alignment, buf.len())?;
        if tensor_index.insert(entry.name.clone(), tensors.len()).is_some() {
            return Err(FormatError::tensor(path, &entry.name, "tensor name appears twice"));
        }
        tensors.push(entry);
    }
    check_overlaps(path, &tensors)?;
    Ok(Header { version, metadata, meta_index, alignment, data_start, tensors, tensor_index })
}

fn read_kv_value(c: &mut Cursor<'_>) -> Result<MetaValue, String> {
    let ty = c.value_type()?;
    read_value(c, ty, 0)
}

/// One value of type `ty`; `depth` counts the arrays it sits in.
fn read_value(c: &mut Cursor<'_>, ty: ValueType, depth: usize) -> Result<MetaValue, String> {
    Ok(match ty {
        ValueType::U8 => MetaValue::U8(c.u8()?),
        ValueType::I8 => MetaValue::I8(c.u8()? as i8),
        ValueType::U16 => MetaValue::U16(c.u16()?),
        ValueType::I16 => MetaValue::I16(c.u16()? as i16),
        ValueType::U32 => MetaValue::U32(c.u32()?),
        ValueType::I32 => MetaValue::I32(c.u32()? as i32),
        ValueType::F32 => MetaValue::F32(f32::from_bits(c.u32()?)),
        ValueType::Bool => MetaValue::Bool(c.u8()? != 0),
        ValueType::Str => MetaValue::Str(c.string("string value", MAX_STRING_BYTES)?.to_string()),
        ValueType::U64 => MetaValue::U64(c.u64()?),
        ValueType::I64 => MetaValue::I64(c.u64()? as i64),
        ValueType::F64 => MetaValue::F64(f64::from_bits(c.u64()?)),
        ValueType::Array => MetaValue::Array(read_array(c, depth + 1)?),
    })
}

/// An array header and its items (checked, not decoded); `depth` is this array's nesting level.
fn read_array(c: &mut Cursor<'_>, depth: usize) -> Result<MetaArray, String> {
    if depth > MAX_ARRAY_DEPTH {
        return Err(format!("arrays nested deeper than {MAX_ARRAY_DEPTH} levels at offset {}", c.pos()));
    }
    let elem = c.value_type()?;
    let len = c.count("array length", elem.min_bytes(), MAX_ARRAY_LEN)?;
    let start = c.pos();
    match elem.fixed_bytes() {
        Some(size) => {
            let bytes = len.checked_mul(size).ok_or("array byte length overflows")?;
            c.take(bytes)?;
        }
        None => {
            for _ in 0..len {
                match elem {
                    ValueType::Str => {
                        c.string("array string", MAX_STRING_BYTES)?;
                    }
                    _ => {
                        read_array(c, depth + 1)?;
                    }
                }
            }
        }
    }
    Ok(MetaArray { elem, len, range: start..c.pos() })
}

fn alignment(metadata: &[(String, MetaValue)], index: &HashMap<String, usize>) -> Result<usize, String> {
    let Some((_, value)) = index.get("general.alignment").and_then(|&i| metadata.get(i)) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let a = value.as_u64().ok_or_else(|| {
        format!("general.alignment must be an unsigned integer, found {}", show(&format!("{value:?}")))
    })?;
    if a == 0 || !a.is_power_of_two() || a > MAX_ALIGNMENT {
        return Err(format!("general.alignment {a} must be a power of two up to {MAX_ALIGNMENT}"));
    }
    usize::try_from(a).map_err(|_| format!("general.alignment {a} does not fit"))
}

/// A tensor info as declared, before it is placed in the data section.
struct RawTensor {
    name: String,
    ne: Vec<usize>,
    ggml_type: u32,
    offset: u64,
}

fn read_tensor_info(path: &Path, c: &mut Cursor<'_>, i: usize) -> Result<RawTensor, FormatError> {
    let name = c
        .string("tensor name", MAX_TENSOR_NAME_BYTES)
        .map_err(|e| FormatError::header(path, format!("tensor info {i}: {e}")))?
        .to_string();
    let bad = |msg: String| FormatError::tensor(path, &name, msg);
    let n_dims = c.u32().map_err(&bad)?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(bad(format!("{n_dims} dimensions; 1 to {MAX_DIMS} are supported")));
    }
    let mut ne = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = c.u64().map_err(&bad)?;
        if d == 0 || d > i64::MAX as u64 {
            return Err(bad(format!("dimension {d} is out of range (1 to 2^63 - 1)")));
        }
        ne.push(usize::try_from(d).map_err(|_| bad(format!("dimension {d} does not fit in memory")))?);
    }
    let ggml_type = c.u32().map_err(&bad)?;
    let offset = c.u64().map_err(&bad)?;
    Ok(RawTensor { name, ne, ggml_type, offset })
}

/// Checks a tensor's type, element count, alignment and extent inside a `file_len`-byte file.
fn place_tensor(
    path: &Path,
    r: RawTensor,
    data_start: usize,
    align: usize,
    file_len: usize,
) -> Result<TensorEntry, FormatError> {
    let bad = |msg: String| FormatError::tensor(path, &r.name, msg);
    let ty = GgmlType::from_code(r.ggml_type).ok_or_else(|| bad(format!("unknown ggml type {}", r.ggml_type)))?;
    let (block_len, block_bytes) = ty.block();
    let numel =
        r.ne.iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("element count of dims {:?} overflows", r.ne)))?;
    let row = r.ne.first().copied().unwrap_or(0);
    if !row.is_multiple_of(block_len) {
        return Err(bad(format!("row length {row} is not a multiple of the {} block length {block_len}", ty.name())));
    }
    let nbytes = (numel / block_len)
        .checked_mul(block_bytes)
        .ok_or_else(|| bad(format!("byte size of dims {:?} overflows", r.ne)))?;
    if !r.offset.is_multiple_of(align as u64) {
        return Err(bad(format!("data offset {} is not a multiple of the alignment {align}", r.offset)));
    }
    let begin = usize::try_from(r.offset)
        .ok()
        .and_then(|o| o.checked_add(data_start))
        .ok_or_else(|| bad(format!("data offset {} overflows", r.offset)))?;
    let end = begin.checked_add(nbytes).filter(|&e| e <= file_len).ok_or_else(|| {
        bad(format!("data [{begin}, {begin} + {nbytes}) runs past the end of the {file_len}-byte file"))
    })?;
    let shape = r.ne.iter().rev().copied().collect();
    Ok(TensorEntry { name: r.name, ggml_type: ty, shape, range: begin..end })
}

fn check_overlaps(path: &Path, tensors: &[TensorEntry]) -> Result<(), FormatError> {
    let mut spans: Vec<(usize, usize, &str)> =
        tensors.iter().map(|t| (t.range.start, t.range.end, t.name.as_str())).collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        if let [a, b] = pair
            && b.0 < a.1
        {
            return Err(FormatError::tensor(path, b.2, format!("data overlaps tensor '{}'", show(a.2))));
        }
    }
    Ok(())
}
