//! Taking tensors from a checkpoint onto a backend, refusing any whose presence, shape or dtype
//! disagrees with what the config implies.

use crate::error::ModelError;
use std::path::{Path, PathBuf};
use tf_backend::Backend;
use tf_formats::{Checkpoint, TensorView};

/// Where weights come from, by Hugging Face tensor name (a safetensors directory or a GGUF
/// file mapped onto HF names).
pub trait TensorSource {
    /// The tensor `name`, `None` when absent.
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError>;
    /// Whether the source has `name`.
    fn contains(&self, name: &str) -> bool;
}

impl TensorSource for Checkpoint {
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError> {
        Ok(Checkpoint::get(self, name)?)
    }

    fn contains(&self, name: &str) -> bool {
        Checkpoint::contains(self, name)
    }
}

impl TensorSource for crate::gguf::GgufSource {
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError> {
        crate::gguf::GgufSource::get(self, name)
    }

    fn contains(&self, name: &str) -> bool {
        crate::gguf::GgufSource::contains(self, name)
    }
}

/// An MLP's gate and up projections: two weights, or one packed (`tf_backend::gate_up`).
pub enum GateUp<M> {
    /// Gate, then up.
    Apart(M, M),
    /// Both in one weight.
    Packed(M),
}

/// Loads named tensors with checked shapes.
pub struct Loader<'a, B: Backend> {
    ckpt: &'a dyn TensorSource,
    dir: PathBuf,
    backend: &'a B,
}

impl<'a, B: Backend> Loader<'a, B> {
    /// The backend's [`Backend::fresh_id`]: the loaded model's identity.
    pub fn fresh_id(&self) -> u64 {
        self.backend.fresh_id()
    }

    /// A loader over `ckpt` (from `dir`) for `backend`.
    pub fn new(ckpt: &'a dyn TensorSource, dir: &Path, backend: &'a B) -> Loader<'a, B> {
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
        if !t.dtype.is_weight() {
            let msg = format!("dtype {} is not a float or quantized weight type", t.dtype);
            return Err(ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg });
        }
        Ok(t)
    }

    /// A weight matrix `[rows, cols]`.
    pub fn mat(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        Ok(self.backend.mat(&self.view(name, &[rows, cols])?)?)
    }

    /// The gate and up weights (`[rows, cols]` each), packed into one where the backend packs.
    pub fn gate_up(&self, gate: &str, up: &str, rows: usize, cols: usize) -> Result<GateUp<B::Mat>, ModelError> {
        let (g, u) = (self.view(gate, &[rows, cols])?, self.view(up, &[rows, cols])?);
        Ok(match self.backend.mat_gate_up(&g, &u)? {
            Some(gu) => GateUp::Packed(gu),
            None => GateUp::Apart(self.backend.mat(&g)?, self.backend.mat(&u)?),
        })
    }

    /// A weight vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<B::Vec, ModelError> {
        Ok(self.backend.vec(&self.view(name, &[len])?.to_f32()))
    }
}
