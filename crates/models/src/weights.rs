//! Taking tensors from a checkpoint onto a backend, refusing any whose presence, shape or dtype
//! disagrees with what the config implies, and a checkpoint holding tensors the config never reads.

use crate::error::ModelError;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tf_backend::Backend;
use tf_formats::{Checkpoint, TensorView};

/// Where weights come from, by Hugging Face tensor name (a safetensors directory or a GGUF
/// file mapped onto HF names).
pub trait TensorSource {
    /// The tensor `name`, `None` when absent.
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError>;
    /// Whether the source has `name`.
    fn contains(&self, name: &str) -> bool;
    /// Every tensor it holds by Hugging Face name, `None` when it cannot list them so.
    fn names(&self) -> Option<Vec<String>> {
        None
    }
}

impl TensorSource for Checkpoint {
    fn get(&self, name: &str) -> Result<Option<TensorView>, ModelError> {
        Ok(Checkpoint::get(self, name)?)
    }

    fn contains(&self, name: &str) -> bool {
        Checkpoint::contains(self, name)
    }

    fn names(&self) -> Option<Vec<String>> {
        Some(Checkpoint::names(self).map(str::to_string).collect())
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
    /// Names taken so far.
    taken: Mutex<BTreeSet<String>>,
    /// Advanced by each tensor taken.
    progress: Option<&'a tf_core::LoadProgress>,
}

impl<'a, B: Backend> Loader<'a, B> {
    /// The backend's [`Backend::fresh_id`]: the loaded model's identity.
    pub fn fresh_id(&self) -> u64 {
        self.backend.fresh_id()
    }

    /// A loader over `ckpt` (from `dir`) for `backend`.
    pub fn new(ckpt: &'a dyn TensorSource, dir: &Path, backend: &'a B) -> Loader<'a, B> {
        Loader { ckpt, dir: dir.to_path_buf(), backend, taken: Mutex::default(), progress: None }
    }

    /// The same loader, counting each tensor it takes in `progress`.
    pub fn with_progress(mut self, progress: &'a tf_core::LoadProgress) -> Loader<'a, B> {
        self.progress = Some(progress);
        self
    }

    /// Whether the checkpoint has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.ckpt.contains(name)
    }

    /// The float tensor `name`, which must have exactly `shape`.
    pub fn view(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string());
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
        if let Some(p) = self.progress {
            p.add_tensor(t.data.as_bytes().len() as u64);
        }
        Ok(t)
    }

    /// A weight matrix `[rows, cols]`.
    pub fn mat(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        Ok(self.backend.mat(&self.view(name, &[rows, cols])?)?)
    }

    /// A weight matrix `[rows, cols]` its matmuls read in f32 ([`Backend::mat_f32`]: a router).
    pub fn mat_f32(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        Ok(self.backend.mat_f32(&self.view(name, &[rows, cols])?)?)
    }

    /// The gate and up weights (`[rows, cols]` each), packed into one where the backend packs.
    pub fn gate_up(&self, gate: &str, up: &str, rows: usize, cols: usize) -> Result<GateUp<B::Mat>, ModelError> {
        let (g, u) = (self.view(gate, &[rows, cols])?, self.view(up, &[rows, cols])?);
        Ok(match self.backend.mat_gate_up(&g, &u)? {
            Some(gu) => GateUp::Packed(gu),
            None => GateUp::Apart(self.backend.mat(&g)?, self.backend.mat(&u)?),
        })
    }

    /// Refuses a checkpoint holding tensors nothing took, apart from those HF checkpoints carry
    /// harmlessly: rotary `inv_freq` buffers, `lm_head.weight` when the head is `tied`, and
    /// names under the `unread` prefixes the family declares.
    pub fn refuse_unused(&self, tied: bool, unread: &[String]) -> Result<(), ModelError> {
        let Some(names) = self.ckpt.names() else { return Ok(()) };
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let harmless = |n: &str| {
            n.ends_with(".rotary_emb.inv_freq")
                || (tied && n == "lm_head.weight")
                || unread.iter().any(|p| n.starts_with(p.as_str()))
        };
        let mut unused: Vec<String> = names.into_iter().filter(|n| !taken.contains(n) && !harmless(n)).collect();
        if unused.is_empty() {
            return Ok(());
        }
        unused.sort();
        Err(ModelError::Unused { dir: self.dir.clone(), tensors: unused })
    }

    /// A weight vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<B::Vec, ModelError> {
        Ok(self.backend.vec(&self.view(name, &[len])?.to_f32()))
    }

    /// A float tensor of exactly `shape` as one weight vector (row-major), with its values on
    /// the host (conv kernels `[channels, 1, kernel]`, which the host-run defaults read).
    pub fn vec_shaped(&self, name: &str, shape: &[usize]) -> Result<(B::Vec, Vec<f32>), ModelError> {
        let host = self.view(name, shape)?.to_f32();
        Ok((self.backend.vec(&host), host))
    }

    /// Rows `rows` (in that order) of the float weight `name` of exactly `[n, cols]`, as one
    /// matrix (a fused projection reordered at load: Qwen3-Next's per-key-head `in_proj_qkvz`).
    pub fn mat_rows(&self, name: &str, n: usize, cols: usize, rows: &[usize]) -> Result<B::Mat, ModelError> {
        let t = self.view(name, &[n, cols])?;
        if !t.dtype.is_float() {
            let msg = format!("dtype {} cannot be reordered by rows (a float type is needed)", t.dtype);
            return Err(ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg });
        }
        let (row, src) = (cols * t.dtype.size(), t.data.as_bytes());
        let mut bytes = Vec::with_capacity(rows.len() * row);
        for &r in rows {
            let part = src.get(r * row..(r + 1) * row).ok_or_else(|| ModelError::Dtype {
                file: t.file.clone(),
                tensor: name.to_string(),
                msg: format!("row {r} is outside its {n} rows"),
            })?;
            bytes.extend_from_slice(part);
        }
        let data = tf_formats::TensorBytes::from_vec(&bytes);
        let view = TensorView {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: vec![rows.len(), cols],
            data,
            file: t.file.clone(),
        };
        Ok(self.backend.mat(&view)?)
    }
}
