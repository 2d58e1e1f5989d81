//! A small GGUF v3 writer for tests, fuzz seeds and synthetic checkpoints. It writes what it is
//! told, including offsets and counts that a reader must refuse.

use super::ValueType;
use half::{bf16, f16};

/// Tensor data placed past this offset is declared but not written.
pub const MAX_WRITTEN_OFFSET: u64 = 1 << 26;

/// A metadata value to write.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteValue {
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
    /// A string.
    Str(String),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float64`.
    F64(f64),
    /// An array with its element type (items should all be of that type).
    Array(ValueType, Vec<WriteValue>),
}

impl WriteValue {
    /// A string.
    pub fn str(s: &str) -> WriteValue {
        WriteValue::Str(s.to_string())
    }

    /// An array of strings.
    pub fn strs(items: &[&str]) -> WriteValue {
        WriteValue::Array(ValueType::Str, items.iter().map(|s| WriteValue::str(s)).collect())
    }

    /// An array of f32.
    pub fn f32s(items: &[f32]) -> WriteValue {
        WriteValue::Array(ValueType::F32, items.iter().map(|&v| WriteValue::F32(v)).collect())
    }

    /// An array of i32.
    pub fn i32s(items: &[i32]) -> WriteValue {
        WriteValue::Array(ValueType::I32, items.iter().map(|&v| WriteValue::I32(v)).collect())
    }

    fn value_type(&self) -> ValueType {
        match self {
            WriteValue::U8(_) => ValueType::U8,
            WriteValue::I8(_) => ValueType::I8,
            WriteValue::U16(_) => ValueType::U16,
            WriteValue::I16(_) => ValueType::I16,
            WriteValue::U32(_) => ValueType::U32,
            WriteValue::I32(_) => ValueType::I32,
            WriteValue::F32(_) => ValueType::F32,
            WriteValue::Bool(_) => ValueType::Bool,
            WriteValue::Str(_) => ValueType::Str,
            WriteValue::U64(_) => ValueType::U64,
            WriteValue::I64(_) => ValueType::I64,
            WriteValue::F64(_) => ValueType::F64,
            WriteValue::Array(..) => ValueType::Array,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            WriteValue::U8(v) => out.push(*v),
            WriteValue::I8(v) => out.extend(v.to_le_bytes()),
            WriteValue::U16(v) => out.extend(v.to_le_bytes()),
            WriteValue::I16(v) => out.extend(v.to_le_bytes()),
            WriteValue::U32(v) => out.extend(v.to_le_bytes()),
            WriteValue::I32(v) => out.extend(v.to_le_bytes()),
            WriteValue::F32(v) => out.extend(v.to_le_bytes()),
            WriteValue::Bool(v) => out.push(u8::from(*v)),
            WriteValue::Str(s) => write_str(out, s),
            WriteValue::U64(v) => out.extend(v.to_le_bytes()),
            WriteValue::I64(v) => out.extend(v.to_le_bytes()),
            WriteValue::F64(v) => out.extend(v.to_le_bytes()),
            WriteValue::Array(elem, items) => {
                out.extend(elem.code().to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    item.write(out);
                }
            }
        }
    }
}

/// A tensor to write: ggml `ne` (innermost first), ggml type code, raw bytes.
#[derive(Clone, Debug)]
pub struct WriteTensor {
    /// Tensor name.
    pub name: String,
    /// Dimensions, innermost first (ggml order).
    pub ne: Vec<u64>,
    /// ggml type code.
    pub ggml_type: u32,
    /// Raw data.
    pub data: Vec<u8>,
    /// Offset in the data section; `None` places it after the previous tensor, aligned.
    pub offset: Option<u64>,
}

/// A GGUF file under construction.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    /// Version written in the header.
    pub version: u32,
    /// Alignment used to lay out tensor data.
    pub alignment: usize,
    /// Metadata in order.
    pub kvs: Vec<(String, WriteValue)>,
    /// Tensors in order.
    pub tensors: Vec<WriteTensor>,
}

impl Default for GgufWriter {
    fn default() -> GgufWriter {
        GgufWriter { version: 3, alignment: 32, kvs: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufWriter {
    /// An empty v3 file with the default alignment.
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Adds a metadata entry.
    pub fn kv(&mut self, key: &str, value: WriteValue) -> &mut GgufWriter {
        self.kvs.push((key.to_string(), value));
        self
    }

    /// Adds a tensor of ggml type `ggml_type` with ggml dims `ne` (innermost first).
    pub fn tensor(&mut self, name: &str, ne: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut GgufWriter {
        self.tensors.push(WriteTensor { name: name.to_string(), ne: ne.to_vec(), ggml_type, data, offset: None });
        self
    }

    /// Adds an f32 tensor of Hugging Face `shape` (outermost first).
    pub fn f32_tensor(&mut self, name: &str, shape: &[usize], values: &[f32]) -> &mut GgufWriter {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, &ggml_ne(shape), 0, data)
    }

    /// Adds an f16 tensor of Hugging Face `shape`.
    pub fn f16_tensor(&mut self, name: &str, shape: &[usize], values: &[f32]) -> &mut GgufWriter {
        let data = values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect();
        self.tensor(name, &ggml_ne(shape), 1, data)
    }

    /// Adds a bf16 tensor of Hugging Face `shape`.
    pub fn bf16_tensor(&mut self, name: &str, shape: &[usize], values: &[f32]) -> &mut GgufWriter {
        let data = values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect();
        self.tensor(name, &ggml_ne(shape), 30, data)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            write_str(&mut out, key);
            out.extend(value.value_type().code().to_le_bytes());
            value.write(&mut out);
        }
        let align = self.alignment.max(1) as u64;
        let mut next = 0u64;
        let mut placed = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let offset = t.offset.unwrap_or(next);
            next = offset.saturating_add(t.data.len() as u64).checked_next_multiple_of(align).unwrap_or(u64::MAX);
            placed.push(offset);
            write_str(&mut out, &t.name);
            out.extend((t.ne.len() as u32).to_le_bytes());
            for d in &t.ne {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ggml_type.to_le_bytes());
            out.extend(offset.to_le_bytes());
        }
        let data_start = (out.len() as u64).next_multiple_of(align) as usize;
        out.resize(data_start, 0);
        for (t, offset) in self.tensors.iter().zip(placed) {
            // Data declared absurdly far out is left unwritten so tests can declare such offsets.
            if offset > MAX_WRITTEN_OFFSET {
                continue;
            }
            let begin = data_start + offset as usize;
            if out.len() < begin + t.data.len() {
                out.resize(begin + t.data.len(), 0);
            }
            out[begin..begin + t.data.len()].copy_from_slice(&t.data);
        }
        out
    }
}

/// ggml `ne` (innermost first) for a Hugging Face `shape` (outermost first).
pub fn ggml_ne(shape: &[usize]) -> Vec<u64> {
    shape.iter().rev().map(|&d| d as u64).collect()
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}
