//! A memory-mapped GGUF file (llama.cpp's format, v2 and v3) with a bounded, fully validated
//! header: typed metadata access and tensors as [`TensorView`]s in Hugging Face shape order; a
//! split one (`gguf-split`'s `-00001-of-0000N.gguf` shards) opened from its first shard as one.

mod parse;
mod split;
pub mod writer;

pub use parse::{
    DEFAULT_ALIGNMENT, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_KEY_BYTES, MAX_KVS,
    MAX_STRING_BYTES, MAX_TENSOR_NAME_BYTES, MAX_TENSORS,
};

use crate::bytes::TensorBytes;
use crate::error::FormatError;
use crate::safetensors_file::TensorView;
use memmap2::Mmap;
use parse::{Cursor, Header};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tf_core::{DType, QuantType};

/// The type of a metadata value (GGUF's `gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    /// `uint8`.
    U8,
    /// `int8`.
    I8,
    /// `uint16`.
    U16,
    /// `int16`.
    I16,
    /// `uint32`.
    U32,
    /// `int32`.
    I32,
    /// `float32`.
    F32,
    /// `bool` (one byte).
    Bool,
    /// Length-prefixed UTF-8 string.
    Str,
    /// Typed, length-prefixed array.
    Array,
    /// `uint64`.
    U64,
    /// `int64`.
    I64,
    /// `float64`.
    F64,
}

impl ValueType {
    const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::Str,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with GGUF code `code`.
    pub fn from_code(code: u32) -> Option<ValueType> {
        Self::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// GGUF's code for the type.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn fixed_bytes(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::Str | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value can take (a string's or array's length prefix included).
    fn min_bytes(self) -> usize {
        match self {
            ValueType::Str => 8,
            ValueType::Array => 12,
            t => t.fixed_bytes().unwrap_or(1),
        }
    }
}

/// A metadata value; arrays are checked at open and decoded on access.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `float32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A UTF-8 string.
    Str(String),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
    /// An array (element type, length and where its items lie).
    Array(MetaArray),
}

/// Where an array's items lie in the file; decode them through [`GgufFile`]'s accessors.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaArray {
    /// Element type.
    pub elem: ValueType,
    /// Number of elements.
    pub len: usize,
    range: Range<usize>,
}

impl MetaValue {
    /// The value as an unsigned integer (any integer type holding a non-negative value).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a float (float types, and integers converted).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::Str(_) => ValueType::Str,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
            MetaValue::Array(_) => ValueType::Array,
        }
    }
}

/// ggml tensor types with a known block layout: (code, name, weights per block, bytes per block).
const GGML_TYPES: &[(u32, &str, usize, usize)] = &[
    (0, "f32", 1, 4),
    (1, "f16", 1, 2),
    (2, "q4_0", 32, 18),
    (3, "q4_1", 32, 20),
    (6, "q5_0", 32, 22),
    (7, "q5_1", 32, 24),
    (8, "q8_0", 32, 34),
    (9, "q8_1", 32, 40),
    (10, "q2_k", 256, 84),
    (11, "q3_k", 256, 110),
    (12, "q4_k", 256, 144),
    (13, "q5_k", 256, 176),
    (14, "q6_k", 256, 210),
    (15, "q8_k", 256, 292),
    (16, "iq2_xxs", 256, 66),
    (17, "iq2_xs", 256, 74),
    (18, "iq3_xxs", 256, 98),
    (19, "iq1_s", 256, 50),
    (20, "iq4_nl", 32, 18),
    (21, "iq3_s", 256, 110),
    (22, "iq2_s", 256, 82),
    (23, "iq4_xs", 256, 136),
    (24, "i8", 1, 1),
    (25, "i16", 1, 2),
    (26, "i32", 1, 4),
    (27, "i64", 1, 8),
    (28, "f64", 1, 8),
    (29, "iq1_m", 256, 56),
    (30, "bf16", 1, 2),
    (34, "tq1_0", 256, 54),
    (35, "tq2_0", 256, 66),
    (39, "mxfp4", 32, 17),
];

/// A ggml tensor type whose block layout is known (supported for loading or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType(u32);

impl GgmlType {
    /// The type with ggml code `code`, when its layout is known.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().any(|t| t.0 == code).then_some(GgmlType(code))
    }

    /// ggml's code for the type.
    pub fn code(self) -> u32 {
        self.0
    }

    fn entry(self) -> (u32, &'static str, usize, usize) {
        GGML_TYPES.iter().copied().find(|t| t.0 == self.0).unwrap_or((self.0, "unknown", 1, 1))
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        self.entry().1
    }

    /// (weights per block, bytes per block).
    pub fn block(self) -> (usize, usize) {
        let (_, _, len, bytes) = self.entry();
        (len, bytes)
    }

    /// The TensorFold dtype, for the types this crate can load.
    pub fn dtype(self) -> Option<DType> {
        Some(match self.0 {
            0 => DType::F32,
            1 => DType::F16,
            30 => DType::BF16,
            2 => DType::Quant(QuantType::Q4_0),
            3 => DType::Quant(QuantType::Q4_1),
            6 => DType::Quant(QuantType::Q5_0),
            7 => DType::Quant(QuantType::Q5_1),
            8 => DType::Quant(QuantType::Q8_0),
            10 => DType::Quant(QuantType::Q2K),
            11 => DType::Quant(QuantType::Q3K),
            12 => DType::Quant(QuantType::Q4K),
            13 => DType::Quant(QuantType::Q5K),
            14 => DType::Quant(QuantType::Q6K),
            39 => DType::Mxfp4,
            _ => return None,
        })
    }

    /// The ggml type that stores `dtype`, if any.
    pub fn from_dtype(dtype: DType) -> Option<GgmlType> {
        (0..=40).map(GgmlType).find(|t| GgmlType::from_code(t.0).is_some() && t.dtype() == Some(dtype))
    }
}

/// One tensor's validated entry: type, shape (outermost first) and byte range in the file.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    /// Tensor name.
    pub name: String,
    /// ggml type.
    pub ggml_type: GgmlType,
    /// Dimensions, outermost first (GGUF's `ne` reversed).
    pub shape: Vec<usize>,
    /// Byte range in the file (inside the data section).
    pub range: Range<usize>,
}

enum Backing {
    Mapped(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mapped(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// An open GGUF file (with the later shards of a split one).
pub struct GgufFile {
    path: PathBuf,
    backing: Backing,
    header: Header,
    /// A split file's later shards: path and data, shard `k + 1` at `k`.
    shards: Vec<(PathBuf, Backing)>,
    /// Per tensor (as `header.tensors`), the shard holding it: 0 this file, `k + 1` `shards[k]`.
    shard_of: Vec<usize>,
}

impl GgufFile {
    /// Maps `path` and validates its header, metadata and every tensor's extent; the first shard
    /// of a split file brings its other shards (each validated so, beside it), a later shard is
    /// refused naming the first.
    pub fn open(path: &Path) -> Result<GgufFile, FormatError> {
        let mut f = GgufFile::open_one(path)?;
        split::join(&mut f)?;
        Ok(f)
    }

    /// Maps and validates one file.
    fn open_one(path: &Path) -> Result<GgufFile, FormatError> {
        let io = |source| FormatError::Io { path: path.to_path_buf(), source };
        let file = FormatError::open(path)?;
        // SAFETY: the map is read-only; a file changed under us can give wrong numbers but
        // every offset used was bounds-checked against the map's length at open time.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse::parse_header(path, &map)?;
        Ok(GgufFile::whole(path, Backing::Mapped(Arc::new(map)), header))
    }

    /// Validates `bytes` as a GGUF file named `path` (tests, fuzzing, files held in memory); a
    /// split file's shard is taken alone.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<GgufFile, FormatError> {
        let header = parse::parse_header(path, &bytes)?;
        Ok(GgufFile::whole(path, Backing::Owned(Arc::new(bytes)), header))
    }

    fn whole(path: &Path, backing: Backing, header: Header) -> GgufFile {
        let shard_of = vec![0; header.tensors.len()];
        GgufFile { path: path.to_path_buf(), backing, header, shards: Vec::new(), shard_of }
    }

    fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// The path and data of the shard holding tensor `t` (an entry of [`GgufFile::tensors`]).
    fn holder(&self, t: &TensorEntry) -> (&Path, &Backing) {
        let shard = self.header.tensor_index.get(&t.name).and_then(|&i| self.shard_of.get(i)).copied().unwrap_or(0);
        match shard.checked_sub(1).and_then(|k| self.shards.get(k)) {
            Some((path, backing)) => (path, backing),
            None => (&self.path, &self.backing),
        }
    }

    /// The paths of a split file's shards after this one (empty for a whole file).
    pub fn shard_paths(&self) -> impl Iterator<Item = &Path> {
        self.shards.iter().map(|(p, _)| p.as_path())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Alignment of tensor data.
    pub fn alignment(&self) -> usize {
        self.header.alignment
    }

    /// Offset of the data section in the file.
    pub fn data_offset(&self) -> usize {
        self.header.data_start
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.header.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        let i = *self.header.meta_index.get(key)?;
        self.header.metadata.get(i).map(|(_, v)| v)
    }

    fn wrong(&self, key: &str, v: &MetaValue, expected: &str) -> FormatError {
        FormatError::header(&self.path, format!("metadata '{key}' is {:?}, expected {expected}", v.value_type()))
    }

    /// A string value; an error when `key` holds another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Str(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, v, "a string")),
        }
    }

    /// A non-negative integer value of any integer type.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| self.wrong(key, v, "a non-negative integer")),
        }
    }

    /// A float value (f32, f64 or an integer, converted).
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(|x| Some(x as f32)).ok_or_else(|| self.wrong(key, v, "a number")),
        }
    }

    /// A boolean value.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, v, "a bool")),
        }
    }

    /// The `general.architecture` string (required by GGUF).
    pub fn architecture(&self) -> Result<&str, FormatError> {
        self.get_str("general.architecture")?
            .ok_or_else(|| FormatError::header(&self.path, "metadata has no 'general.architecture'"))
    }

    fn array(&self, key: &str) -> Result<Option<&MetaArray>, FormatError> {
        match self.get(key) {
            None => Ok(None),
            Some(MetaValue::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.wrong(key, v, "an array")),
        }
    }

    /// Decodes each item of the flat array `key` with `item`.
    fn decode_array<T>(
        &self,
        key: &str,
        item: impl Fn(&mut Cursor<'_>, ValueType) -> Result<Option<T>, String>,
    ) -> Result<Option<Vec<T>>, FormatError> {
        let Some(arr) = self.array(key)? else { return Ok(None) };
        let bad = |msg: String| FormatError::header(&self.path, format!("metadata '{key}': {msg}"));
        let items = self.bytes().get(arr.range.clone()).ok_or_else(|| bad("array lies outside the file".into()))?;
        let mut c = Cursor::new(items, 0);
        let mut out = Vec::with_capacity(arr.len);
        for i in 0..arr.len {
            match item(&mut c, arr.elem).map_err(&bad)? {
                Some(v) => out.push(v),
                None => return Err(bad(format!("item {i} of a {:?} array has the wrong type or range", arr.elem))),
            }
        }
        Ok(Some(out))
    }

    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<String>>, FormatError> {
        self.decode_array(key, |c, elem| match elem {
            ValueType::Str => Ok(Some(c.string("array string", MAX_STRING_BYTES)?.to_string())),
            _ => Ok(None),
        })
    }

    /// An array of floats (f32 or f64 items).
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>, FormatError> {
        self.decode_array(key, |c, elem| match elem {
            ValueType::F32 => Ok(Some(f32::from_bits(c.u32()?))),
            ValueType::F64 => Ok(Some(f64::from_bits(c.u64()?) as f32)),
            _ => Ok(None),
        })
    }

    /// An array of flags: bool items, or integers (0 false, anything else true).
    pub fn get_bool_array(&self, key: &str) -> Result<Option<Vec<bool>>, FormatError> {
        self.decode_array(key, |c, elem| {
            Ok(match elem {
                ValueType::Bool | ValueType::U8 | ValueType::I8 => Some(c.u8()? != 0),
                ValueType::U16 | ValueType::I16 => Some(c.u16()? != 0),
                ValueType::U32 | ValueType::I32 => Some(c.u32()? != 0),
                ValueType::U64 | ValueType::I64 => Some(c.u64()? != 0),
                _ => None,
            })
        })
    }

    /// An array of integers that fit in i32 (any integer item type).
    pub fn get_i32_array(&self, key: &str) -> Result<Option<Vec<i32>>, FormatError> {
        self.decode_array(key, |c, elem| {
            let v: Option<i64> = match elem {
                ValueType::U8 => Some(c.u8()?.into()),
                ValueType::I8 => Some((c.u8()? as i8).into()),
                ValueType::U16 => Some(c.u16()?.into()),
                ValueType::I16 => Some((c.u16()? as i16).into()),
                ValueType::U32 => Some(c.u32()?.into()),
                ValueType::I32 => Some((c.u32()? as i32).into()),
                ValueType::U64 => i64::try_from(c.u64()?).ok(),
                ValueType::I64 => Some(c.u64()? as i64),
                _ => None,
            };
            Ok(v.and_then(|v| i32::try_from(v).ok()))
        })
    }

    /// Every tensor's entry, in file order.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.header.tensors
    }

    /// The named tensor's entry.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorEntry> {
        self.header.tensor_index.get(name).and_then(|&i| self.header.tensors.get(i))
    }

    /// Every byte before the tensor data: header, metadata and tensor entries.
    pub fn header_bytes(&self) -> &[u8] {
        self.bytes().get(..self.data_offset()).unwrap_or_default()
    }

    /// The raw bytes of tensor `t` (an entry of [`GgufFile::tensors`]), whatever its type.
    pub fn tensor_data(&self, t: &TensorEntry) -> &[u8] {
        self.holder(t).1.bytes().get(t.range.clone()).unwrap_or_default()
    }

    /// The named tensor, `None` when absent; a type this crate cannot load is an error.
    pub fn tensor(&self, name: &str) -> Result<Option<TensorView>, FormatError> {
        let Some(t) = self.tensor_info(name) else { return Ok(None) };
        let (path, backing) = self.holder(t);
        let dtype = t.ggml_type.dtype().ok_or_else(|| {
            FormatError::tensor(path, name, format!("ggml type {} is not supported", t.ggml_type.name()))
        })?;
        let data = match backing {
            Backing::Mapped(map) => TensorBytes::Mapped(map.clone(), t.range.clone()),
            Backing::Owned(bytes) => TensorBytes::from_vec(
                bytes
                    .get(t.range.clone())
                    .ok_or_else(|| FormatError::tensor(path, name, "data lies outside the file"))?,
            ),
        };
        let file = path.to_path_buf();
        Ok(Some(TensorView { name: name.to_string(), dtype, shape: t.shape.clone(), data, file }))
    }
}
