//! Taking tensors from a checkpoint onto a backend, refusing any whose presence, shape or dtype
//! disagrees with what the config implies, and a checkpoint holding tensors the config never reads.

use crate::error::ModelError;
use crate::quant_config::Fp8Config;
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
    /// The checkpoint's FP8 config, which FP8 weights need.
    fp8: Option<Fp8Config>,
    /// This rank's part of a tensor-parallel load: the `*_split` methods take its slice.
    shard: Option<crate::tp::Shard>,
}

impl<'a, B: Backend> Loader<'a, B> {
    /// The backend's [`Backend::fresh_id`]: the loaded model's identity.
    pub fn fresh_id(&self) -> u64 {
        self.backend.fresh_id()
    }

    /// A loader over `ckpt` (from `dir`) for `backend`.
    pub fn new(ckpt: &'a dyn TensorSource, dir: &Path, backend: &'a B) -> Loader<'a, B> {
        Loader {
            ckpt,
            dir: dir.to_path_buf(),
            backend,
            taken: Mutex::default(),
            progress: None,
            fp8: None,
            shard: None,
        }
    }

    /// The same loader, counting each tensor it takes in `progress`.
    pub fn with_progress(mut self, progress: &'a tf_core::LoadProgress) -> Loader<'a, B> {
        self.progress = Some(progress);
        self
    }

    /// The same loader, taking FP8 weights with their scales as `fp8` says.
    pub fn with_fp8(mut self, fp8: Option<Fp8Config>) -> Loader<'a, B> {
        self.fp8 = fp8;
        self
    }

    /// The same loader, taking `shard`'s part of each split weight.
    pub fn with_shard(mut self, shard: Option<crate::tp::Shard>) -> Loader<'a, B> {
        self.shard = shard;
        self
    }

    /// The tensor-parallel shard this loader takes, if any.
    pub fn shard(&self) -> Option<&crate::tp::Shard> {
        self.shard.as_ref()
    }

    /// This rank's part of `n` items (all of them without a shard).
    pub fn part(&self, n: usize) -> std::ops::Range<usize> {
        self.shard.as_ref().map_or(0..n, |s| s.part(n))
    }

    /// The routed experts of `n` this rank holds, and the part of each one's `inter`
    /// intermediate rows: every expert's part under tensor parallelism, this rank's experts
    /// whole under expert parallelism.
    pub fn experts_part(&self, n: usize, inter: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        match &self.shard {
            Some(s) if s.expert_parallel => (s.part(n), 0..inter),
            _ => (0..n, self.part(inter)),
        }
    }

    /// The weight `name` of `[rows, cols]` cut by rows (a column-parallel projection): this
    /// rank's part of its `rows / unit` units of `unit` rows (heads of `unit` width); the whole
    /// weight without a shard.
    pub fn mat_split_rows(&self, name: &str, rows: usize, cols: usize, unit: usize) -> Result<B::Mat, ModelError> {
        self.mat_part_rows(name, rows, cols, unit, self.part(rows / unit.max(1)))
    }

    /// Units `units` of the `rows / unit` units of `unit` rows of the weight `name` of `[rows,
    /// cols]` (every unit: the weight as it is).
    pub fn mat_part_rows(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        unit: usize,
        units: std::ops::Range<usize>,
    ) -> Result<B::Mat, ModelError> {
        let unit = unit.max(1);
        if units == (0..rows / unit) {
            return self.mat(name, rows, cols);
        }
        self.mat_rows(name, rows, cols, &(units.start * unit..units.end * unit).collect::<Vec<_>>())
    }

    /// This rank's KV heads of `n`: its part where the ranks split them, else the one head its
    /// query heads read (`n` dividing the ranks: each head held by several ranks, as vLLM
    /// replicates them).
    pub fn kv_part(&self, n: usize) -> std::ops::Range<usize> {
        match &self.shard {
            Some(s) if n < s.size() => {
                let h = s.rank() * n / s.size();
                h..h + 1
            }
            _ => self.part(n),
        }
    }

    /// The weight `name` of `[rows, cols]` cut by columns (a row-parallel projection, whose
    /// outputs the ranks sum): this rank's part of its `cols / unit` units.
    pub fn mat_split_cols(&self, name: &str, rows: usize, cols: usize, unit: usize) -> Result<B::Mat, ModelError> {
        let units = self.part(cols / unit.max(1));
        self.mat_part_cols(name, rows, cols, units.start * unit..units.end * unit)
    }

    /// Columns `part` of the weight `name` of `[rows, cols]` (every column: the weight as it is).
    pub fn mat_part_cols(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        part: std::ops::Range<usize>,
    ) -> Result<B::Mat, ModelError> {
        if part == (0..cols) {
            return self.mat(name, rows, cols);
        }
        self.mat_cols(name, rows, cols, part.start, part.len())
    }

    /// The vector `name` of `len` values cut like a column-parallel projection's rows: units
    /// `units` of `unit` values.
    pub fn vec_part(
        &self,
        name: &str,
        len: usize,
        unit: usize,
        units: std::ops::Range<usize>,
    ) -> Result<B::Vec, ModelError> {
        let all = self.vec_values(name, &[len])?;
        let unit = unit.max(1);
        let part = all.get(units.start * unit..units.end * unit).ok_or_else(|| ModelError::Dtype {
            file: self.dir.clone(),
            tensor: name.to_string(),
            msg: format!("units {units:?} of {unit} values are outside its {len}"),
        })?;
        Ok(self.backend.vec(part))
    }

    /// [`Loader::gate_up`] of this rank's rows of both.
    pub fn gate_up_split(&self, gate: &str, up: &str, rows: usize, cols: usize) -> Result<GateUp<B::Mat>, ModelError> {
        if self.shard.is_none() {
            return self.gate_up(gate, up, rows, cols);
        }
        let keep = self.unit_rows(rows, 1);
        let (g, u) = (self.view(gate, &[rows, cols])?, self.view(up, &[rows, cols])?);
        if [g.dtype, u.dtype].contains(&tf_core::DType::F8E4M3) {
            return Ok(GateUp::Apart(self.mat_rows(gate, rows, cols, &keep)?, self.mat_rows(up, rows, cols, &keep)?));
        }
        self.pack(&self.rows_view(&g, rows, cols, &keep)?, &self.rows_view(&u, rows, cols, &keep)?)
    }

    /// The rows of this rank's part of `rows / unit` units of `unit` rows.
    fn unit_rows(&self, rows: usize, unit: usize) -> Vec<usize> {
        let unit = unit.max(1);
        let units = self.part(rows / unit);
        (units.start * unit..units.end * unit).collect()
    }

    /// Whether the checkpoint has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.ckpt.contains(name)
    }

    /// The tensor `name`, marked taken and counted, or `Missing`.
    fn take(&self, name: &str) -> Result<TensorView, ModelError> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string());
        let t = self
            .ckpt
            .get(name)?
            .ok_or_else(|| ModelError::Missing { dir: self.dir.clone(), tensor: name.to_string() })?;
        if let Some(p) = self.progress {
            p.add_tensor(t.data.as_bytes().len() as u64);
        }
        Ok(t)
    }

    /// The float, FP8 or quantized tensor `name`, which must have exactly `shape`.
    pub fn view(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        let t = self.take(name)?;
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

    /// `t` on the backend: an FP8 weight with its checked scales ([`Backend::mat_fp8`]),
    /// any other through `plain`.
    fn weight(
        &self,
        t: &TensorView,
        plain: impl FnOnce(&TensorView) -> Result<B::Mat, tf_backend::BackendError>,
    ) -> Result<B::Mat, ModelError> {
        if t.dtype != tf_core::DType::F8E4M3 {
            return Ok(plain(t)?);
        }
        Ok(self.backend.mat_fp8(t, &self.fp8_scales(t)?)?)
    }

    /// The checked scales of the FP8 weight `t`, taken from the checkpoint beside it.
    fn fp8_scales(&self, t: &TensorView) -> Result<tf_backend::Fp8Scales, ModelError> {
        let q = crate::fp8_weights::needs_config(self.fp8.as_ref(), t)?;
        let s = self.take(&crate::fp8_weights::scale_name(q, &t.name))?;
        crate::fp8_weights::scales(q, t, &s)
    }

    /// A weight matrix `[rows, cols]`.
    pub fn mat(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        self.weight(&self.view(name, &[rows, cols])?, |t| self.backend.mat(t))
    }

    /// A weight matrix `[rows, cols]` its matmuls read in f32 ([`Backend::mat_f32`]: a router).
    pub fn mat_f32(&self, name: &str, rows: usize, cols: usize) -> Result<B::Mat, ModelError> {
        self.weight(&self.view(name, &[rows, cols])?, |t| self.backend.mat_f32(t))
    }

    /// The gate and up weights (`[rows, cols]` each), packed into one where the backend packs
    /// (never FP8 ones).
    pub fn gate_up(&self, gate: &str, up: &str, rows: usize, cols: usize) -> Result<GateUp<B::Mat>, ModelError> {
        let (g, u) = (self.view(gate, &[rows, cols])?, self.view(up, &[rows, cols])?);
        if [g.dtype, u.dtype].contains(&tf_core::DType::F8E4M3) {
            let mat = |t: &TensorView| self.weight(t, |t| self.backend.mat(t));
            return Ok(GateUp::Apart(mat(&g)?, mat(&u)?));
        }
        self.pack(&g, &u)
    }

    /// Gate `g` and up `u` in one weight where the backend packs them, else apart.
    fn pack(&self, g: &TensorView, u: &TensorView) -> Result<GateUp<B::Mat>, ModelError> {
        Ok(match self.backend.mat_gate_up(g, u)? {
            Some(gu) => GateUp::Packed(gu),
            None => GateUp::Apart(self.backend.mat(g)?, self.backend.mat(u)?),
        })
    }

    /// Marks every tensor named under `prefix` as another rank's (expert parallelism: that rank
    /// reads and checks them), so that this rank neither reads them nor reports them unused.
    pub fn leave_under(&self, prefix: &str) {
        let Some(names) = self.ckpt.names() else { return };
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.extend(names.into_iter().filter(|n| n.starts_with(prefix)));
    }

    /// Refuses a checkpoint holding tensors nothing took, apart from those HF checkpoints carry
    /// harmlessly: rotary `inv_freq` buffers, the head's weight `tied_head` where the head is
    /// tied to the embedding, and names under the `unread` prefixes the family declares.
    pub fn refuse_unused(&self, tied_head: Option<&str>, unread: &[String]) -> Result<(), ModelError> {
        let Some(names) = self.ckpt.names() else { return Ok(()) };
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let harmless = |n: &str| {
            n.ends_with(".rotary_emb.inv_freq")
                || tied_head == Some(n)
                || unread.iter().any(|p| n.starts_with(p.as_str()))
        };
        let mut unused: Vec<String> = names.into_iter().filter(|n| !taken.contains(n) && !harmless(n)).collect();
        if unused.is_empty() {
            return Ok(());
        }
        unused.sort();
        Err(ModelError::Unused { dir: self.dir.clone(), tensors: unused })
    }

    /// Refuses tensors named under `prefix` that nothing took (a part loaded on its own, such as
    /// the MTP layers, checks its own names).
    pub fn refuse_unused_under(&self, prefix: &str) -> Result<(), ModelError> {
        let Some(names) = self.ckpt.names() else { return Ok(()) };
        let taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let mut unused: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with(prefix) && !taken.contains(n) && !n.ends_with(".rotary_emb.inv_freq"))
            .collect();
        if unused.is_empty() {
            return Ok(());
        }
        unused.sort();
        Err(ModelError::Unused { dir: self.dir.clone(), tensors: unused })
    }

    /// A weight vector of `len` values.
    pub fn vec(&self, name: &str, len: usize) -> Result<B::Vec, ModelError> {
        Ok(self.backend.vec(&self.vec_values(name, &[len])?))
    }

    /// The f32 values on the host of the weight `name` of exactly `shape` (weights the
    /// host-run defaults read: MLA's absorbed `kv_b_proj`); an FP8 weight's values are each
    /// code times its block's scale, the values its matmuls multiply by.
    pub fn host_values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let t = self.view(name, shape)?;
        if t.dtype != tf_core::DType::F8E4M3 {
            return self.vec_values(name, shape);
        }
        let scales = self.fp8_scales(&t)?;
        let cols = shape.last().copied().unwrap_or(1).max(1);
        let codes = t.data.as_bytes();
        let mut out = vec![0.0; codes.len()];
        for (r, (row, c)) in out.chunks_mut(cols).zip(codes.chunks(cols)).enumerate() {
            scales.dequantize_row(c, r, row);
        }
        Ok(out)
    }

    /// The float tensor `name` of exactly `shape` as rows of `width` values, keeping rows
    /// `channels` in that order (a depthwise conv's channels of this rank; every row for all of
    /// them), as one weight vector and its values on the host.
    pub fn vec_channels(
        &self,
        name: &str,
        shape: &[usize],
        channels: &[usize],
        width: usize,
    ) -> Result<(B::Vec, Vec<f32>), ModelError> {
        let all = self.vec_values(name, shape)?;
        let part: Vec<f32> = channels
            .iter()
            .map(|&c| {
                all.get(c * width..(c + 1) * width).ok_or_else(|| ModelError::Dtype {
                    file: self.dir.clone(),
                    tensor: name.to_string(),
                    msg: format!("channel {c} is outside its {} values", all.len()),
                })
            })
            .collect::<Result<Vec<&[f32]>, _>>()?
            .concat();
        Ok((self.backend.vec(&part), part))
    }

    /// The values of the tensor `name` of exactly `shape`, refused when FP8 (vectors have no
    /// scales).
    fn vec_values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let t = self.view(name, shape)?;
        if t.dtype == tf_core::DType::F8E4M3 {
            let msg = format!("dtype {} is for weight matrices; a vector must be a float type", t.dtype);
            return Err(ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg });
        }
        Ok(t.to_f32())
    }

    /// The integer tensor `name` (I64) of exactly `[len]` on the host, each value below `bound`
    /// (an index table: the Gemma 4 assistant's `token_ordering`).
    pub fn index_values(&self, name: &str, len: usize, bound: usize) -> Result<Vec<u32>, ModelError> {
        let t = self.take(name)?;
        let dtype = |msg: String| ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg };
        if t.shape != [len] {
            return Err(ModelError::Shape {
                file: t.file.clone(),
                tensor: name.to_string(),
                expected: vec![len],
                found: t.shape.clone(),
            });
        }
        if t.dtype != tf_core::DType::I64 {
            return Err(dtype(format!("dtype {} is not I64, an index table's type", t.dtype)));
        }
        let values = t.data.as_bytes().chunks_exact(8).map(|c| {
            let v = i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            u32::try_from(v).ok().filter(|&u| (u as usize) < bound).ok_or(v)
        });
        values
            .enumerate()
            .map(|(i, v)| v.map_err(|v| dtype(format!("value {v} at {i} is outside 0..{bound}"))))
            .collect()
    }

    /// The byte tensor `name` (dtype U8) of exactly `shape`: packed codes or scales the family
    /// decodes (gpt-oss's MXFP4 experts).
    pub fn u8_view(&self, name: &str, shape: &[usize]) -> Result<TensorView, ModelError> {
        let t = self.take(name)?;
        if t.shape != shape {
            return Err(ModelError::Shape {
                file: t.file.clone(),
                tensor: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape.clone(),
            });
        }
        if t.dtype != tf_core::DType::U8 {
            let msg = format!("dtype {} is not U8, packed codes' type", t.dtype);
            return Err(ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg });
        }
        Ok(t)
    }

    /// The backend weights are taken onto.
    pub fn backend_ref(&self) -> &B {
        self.backend
    }

    /// `values` as a weight vector on the backend (a vector the family makes: ones, a scaled norm).
    pub fn backend_vec(&self, values: &[f32]) -> B::Vec {
        self.backend.vec(values)
    }

    /// The backend's own copy of per-head weights `w`, where it reads one (`Backend::head_copy`).
    pub fn head_copy(&self, w: &tf_backend::HeadWeights<'_>) -> Option<B::Vec> {
        self.backend.head_copy(w)
    }

    /// Rows `rows` of matrix `e` of the float 3-D tensor `name` of exactly `[n, r, cols]` (fused
    /// experts: `experts.gate_up_proj` `[experts, 2 inter, hidden]`), as stored, or with `scale`
    /// as f32 values times it.
    pub fn stacked_mat(
        &self,
        name: &str,
        shape: [usize; 3],
        e: usize,
        rows: std::ops::Range<usize>,
        scale: Option<f32>,
    ) -> Result<B::Mat, ModelError> {
        self.stacked_part(name, shape, e, rows, 0..shape[2], scale)
    }

    /// [`Loader::stacked_mat`] of columns `cols` of those rows (a row-parallel shard of a
    /// stacked expert's down projection).
    pub fn stacked_part(
        &self,
        name: &str,
        shape: [usize; 3],
        e: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        scale: Option<f32>,
    ) -> Result<B::Mat, ModelError> {
        let [n, r, width] = shape;
        let t = self.view(name, &shape)?;
        let bad = |msg: String| ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg };
        if !t.dtype.is_float() {
            return Err(bad(format!("dtype {} cannot be split per expert (a float type is needed)", t.dtype)));
        }
        if e >= n || rows.end > r || rows.start > rows.end || cols.end > width || cols.start > cols.end {
            return Err(bad(format!(
                "rows {rows:?}, columns {cols:?} of matrix {e} are outside its [{n}, {r}, {width}]"
            )));
        }
        let size = t.dtype.size();
        let src = t.data.as_bytes();
        let mut part = Vec::with_capacity(rows.len() * cols.len() * size);
        for row in rows.clone() {
            let at = ((e * r + row) * width + cols.start) * size;
            let bytes =
                src.get(at..at + cols.len() * size).ok_or_else(|| bad(format!("matrix {e} is outside the data")))?;
            part.extend_from_slice(bytes);
        }
        let (dtype, data) = match scale {
            None => (t.dtype, tf_formats::TensorBytes::from_vec(&part)),
            Some(c) => {
                let v = tf_formats::TensorBytes::from_vec(&part).to_f32(t.dtype);
                let bytes: Vec<u8> = v.iter().flat_map(|x| (x * c).to_le_bytes()).collect();
                (tf_core::DType::F32, tf_formats::TensorBytes::from_vec(&bytes))
            }
        };
        let view =
            TensorView { name: t.name.clone(), dtype, shape: vec![rows.len(), cols.len()], data, file: t.file.clone() };
        Ok(self.backend.mat(&view)?)
    }

    /// Matrix `e` of the float 3-D tensor `name` of exactly `[n, r, w]`, stored input-first
    /// (`x @ W`, gpt-oss's experts), as the weight `[cols.len(), rows.len()]` whose row `j` is
    /// column `cols[j]` over rows `rows` of that matrix: the transpose of a column selection,
    /// in the tensor's own dtype.
    pub fn stacked_t(
        &self,
        name: &str,
        shape: [usize; 3],
        e: usize,
        rows: std::ops::Range<usize>,
        cols: &[usize],
    ) -> Result<B::Mat, ModelError> {
        let [n, r, width] = shape;
        let t = self.view(name, &shape)?;
        let bad = |msg: String| ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg };
        if !t.dtype.is_float() {
            return Err(bad(format!("dtype {} cannot be split per expert (a float type is needed)", t.dtype)));
        }
        if e >= n || rows.end > r || rows.start > rows.end || cols.iter().any(|&c| c >= width) {
            return Err(bad(format!("rows {rows:?} or a column of matrix {e} are outside its [{n}, {r}, {width}]")));
        }
        let size = t.dtype.size();
        let src = t.data.as_bytes();
        let mut part = Vec::with_capacity(rows.len() * cols.len() * size);
        for &c in cols {
            for row in rows.clone() {
                let at = ((e * r + row) * width + c) * size;
                part.extend_from_slice(
                    src.get(at..at + size).ok_or_else(|| bad(format!("matrix {e} is outside the data")))?,
                );
            }
        }
        let data = tf_formats::TensorBytes::from_vec(&part);
        let view = TensorView {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: vec![cols.len(), rows.len()],
            data,
            file: t.file.clone(),
        };
        Ok(self.backend.mat(&view)?)
    }

    /// f32 `values` `[rows, cols]` made from the tensor `name` as a weight its matmuls read in
    /// f32 ([`Backend::mat_f32`]: a router with its scales folded in).
    pub fn mat_f32_from(&self, name: &str, rows: usize, cols: usize, values: &[f32]) -> Result<B::Mat, ModelError> {
        let t = self.view(name, &[rows, cols])?;
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        let data = tf_formats::TensorBytes::from_vec(&bytes);
        let view = TensorView { name: t.name, dtype: tf_core::DType::F32, shape: vec![rows, cols], data, file: t.file };
        Ok(self.backend.mat_f32(&view)?)
    }

    /// Columns `start..start + width` of the float, FP8 or GGML block-quantized weight `name` of
    /// exactly `[rows, n]`, as one `[rows, width]` matrix (one layer's slice of a table packing
    /// every layer side by side; a row-parallel shard). An FP8 weight's columns keep their codes,
    /// each with its block's scale ([`crate::fp8_weights::select_cols`]); a quantized one's are
    /// whole blocks of it, kept as stored (columns inside a block are refused).
    pub fn mat_cols(
        &self,
        name: &str,
        rows: usize,
        n: usize,
        start: usize,
        width: usize,
    ) -> Result<B::Mat, ModelError> {
        let t = self.view(name, &[rows, n])?;
        let bad = |msg: String| ModelError::Dtype { file: t.file.clone(), tensor: name.to_string(), msg };
        let fp8 = t.dtype == tf_core::DType::F8E4M3;
        // Columns come in units: one value, or one block of a GGML quantized type.
        let (unit, unit_bytes) = match t.dtype {
            tf_core::DType::Quant(q) => (q.block_len(), q.block_bytes()),
            d if d.is_float() || fp8 => (1, d.size()),
            d => {
                return Err(bad(format!(
                    "dtype {d} cannot be sliced by columns (a float or GGML block type is needed)"
                )));
            }
        };
        if start.checked_add(width).is_none_or(|end| end > n) {
            return Err(bad(format!("columns {start}..{start}+{width} are outside its {n} columns")));
        }
        if [n, start, width].iter().any(|v| !v.is_multiple_of(unit)) {
            return Err(bad(format!("columns {start}..{start}+{width} of {n} do not fall on its {unit}-value blocks")));
        }
        let src = t.data.as_bytes();
        let (row_bytes, part_bytes) = (n / unit * unit_bytes, width / unit * unit_bytes);
        let mut bytes = Vec::with_capacity(rows * part_bytes);
        for r in 0..rows {
            let at = r * row_bytes + start / unit * unit_bytes;
            let part = src.get(at..at + part_bytes).ok_or_else(|| bad(format!("row {r} is outside the data")))?;
            bytes.extend_from_slice(part);
        }
        let view = TensorView {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: vec![rows, width],
            data: tf_formats::TensorBytes::from_vec(&bytes),
            file: t.file.clone(),
        };
        if fp8 {
            let scales = crate::fp8_weights::select_cols(&self.fp8_scales(&t)?, rows, n, start, width);
            return Ok(self.backend.mat_fp8(&view, &scales)?);
        }
        Ok(self.backend.mat(&view)?)
    }

    /// Rows `rows` (in that order) of the weight `name` of exactly `[n, cols]`, as one matrix
    /// (a fused projection reordered at load: Qwen3-Next's per-key-head `in_proj_qkvz`, MLA's
    /// query and latent parts). An FP8 weight's rows keep their codes, each with its block
    /// row's scales ([`crate::fp8_weights::select_rows`]).
    pub fn mat_rows(&self, name: &str, n: usize, cols: usize, rows: &[usize]) -> Result<B::Mat, ModelError> {
        let t = self.view(name, &[n, cols])?;
        let view = self.rows_view(&t, n, cols, rows)?;
        if t.dtype == tf_core::DType::F8E4M3 {
            let scales = crate::fp8_weights::select_rows(&self.fp8_scales(&t)?, cols, rows);
            return Ok(self.backend.mat_fp8(&view, &scales)?);
        }
        Ok(self.backend.mat(&view)?)
    }

    /// Rows `rows` (in that order) of `t` `[n, cols]` as a tensor of its dtype (float or FP8).
    fn rows_view(&self, t: &TensorView, n: usize, cols: usize, rows: &[usize]) -> Result<TensorView, ModelError> {
        let name = &t.name;
        if !t.dtype.is_float() && t.dtype != tf_core::DType::F8E4M3 {
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
        Ok(TensorView {
            name: t.name.clone(),
            dtype: t.dtype,
            shape: vec![rows.len(), cols],
            data: tf_formats::TensorBytes::from_vec(&bytes),
            file: t.file.clone(),
        })
    }
}
