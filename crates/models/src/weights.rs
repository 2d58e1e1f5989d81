//! Taking tensors from a checkpoint onto a backend, refusing any whose presence, shape or dtype
//! disagrees with what the config implies.

use crate::error::ModelError;
use std::path::{Path, PathBuf};
use tf_backend::Backend;
use tf_formats::{Checkpoint, TensorView};

/// Loads named tensors with checked shapes.
pub struct Loader<'a, B: Backend> {
    ckpt: &'a Checkpoint,
    dir: PathBuf,
    backend: &'a B,
}

impl<'a, B: Backend> Loader<'a, B> {
    /// A loader over `ckpt` (from `dir`) for `backend`.
    pub fn new(ckpt: &'a Checkpoint, dir: &Path, backend: &'a B) -> Loader<'a, B> {
        Loader { ckpt, dir: dir.to_path_buf(), backend }
    }

    /// Whether the checkpoint has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.ckpt.contains(name)
    }

    /// The float tensor `name`, which must have exactly `shape`.
    pub fn view(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        let t = self
            .ckpt
            .get(name)?
            .ok_or_else(|| ModelError::Missing { dir: self.dir.clone(), tensor: name.to_string() })?;
        if t.shape != shape {
            return Err(ModelError::Shape {
                file: t.file.clone(),
                tensor: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape.clone(),
            });
        }
        if !t.dtype.is_float() {
            let msg = format!("dtype {} is not bf16, f16 or f32", t.dtype);
            return Err(ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg });
        }
        Ok(t)
    }

    /// A weight matrix `[rows, cols]`.
    pub fn mat(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        Ok(self.backend.mat(&self.view(name, &[rows, cols])?)?)
    }

    /// A weight vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<B::Vec, ModelError> {
        Ok(self.backend.vec(&self.view(name, &[len])?.to_f32()))
    }
}
