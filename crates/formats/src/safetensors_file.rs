//! A memory-mapped safetensors file whose header passed every rule of `safetensors_header`.

use crate::bytes::TensorBytes;
use crate::error::FormatError;
use crate::safetensors_header::{Header, parse_header};
pub use crate::safetensors_header::{MAX_HEADER_BYTES, TensorInfo};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tf_core::DType;

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

enum Backing {
    Mapped(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

/// An open safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    backing: Backing,
    header: Header,
}

impl SafetensorsFile {
    /// Maps `path` and validates its header and every tensor's offsets.
    pub fn open(path: &Path) -> Result<SafetensorsFile, FormatError> {
        let io = |source| FormatError::Io { path: path.to_path_buf(), source };
        let file = FormatError::open(path)?;
        // SAFETY: the map is read-only; a file changed under us can give wrong numbers but
        // every offset used is bounds-checked against the map's length at open time.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = parse_header(path, &map)?;
        Ok(SafetensorsFile { path: path.to_path_buf(), backing: Backing::Mapped(Arc::new(map)), header })
    }

    /// Validates `bytes` as a safetensors file named `path` (tests, fuzzing, files held in memory).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<SafetensorsFile, FormatError> {
        let header = parse_header(path, &bytes)?;
        Ok(SafetensorsFile { path: path.to_path_buf(), backing: Backing::Owned(Arc::new(bytes)), header })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names and entries, sorted by name.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.header.tensors
    }

    /// The free-form `__metadata__` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.header.metadata
    }

    /// The raw bytes of tensor `t` (an entry of [`SafetensorsFile::tensors`]), whatever its dtype.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes: &[u8] = match &self.backing {
            Backing::Mapped(map) => map,
            Backing::Owned(bytes) => bytes,
        };
        bytes.get(self.header.data_start + t.begin..self.header.data_start + t.end).unwrap_or_default()
    }

    /// The named tensor, or `None` when absent; unsupported dtypes are an error.
    pub fn tensor(&self, name: &str) -> Result<Option<TensorView>, FormatError> {
        let Some(info) = self.header.tensors.get(name) else { return Ok(None) };
        let dtype = info.dtype.clone().map_err(|d| {
            FormatError::tensor(&self.path, name, format!("unsupported dtype {}", crate::printable::show(&d)))
        })?;
        let range = self.header.data_start + info.begin..self.header.data_start + info.end;
        let data = match &self.backing {
            Backing::Mapped(map) => TensorBytes::Mapped(map.clone(), range),
            Backing::Owned(bytes) => TensorBytes::from_vec(&bytes[range]),
        };
        Ok(Some(TensorView { name: name.to_string(), dtype, shape: info.shape.clone(), data, file: self.path.clone() }))
    }
}
