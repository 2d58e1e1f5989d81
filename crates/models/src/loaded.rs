//! Opening a Hugging Face checkpoint directory: config, generation config, tokenizer, weights,
//! all validated against each other before anything runs (docs/architecture.md, loading).

use crate::config::RawConfig;
use crate::decoder::Decoder;
use crate::error::ModelError;
use crate::fingerprint::{self, Part};
use crate::gguf::{self, GgufSource};
use crate::limits::{self, TensorBounds};
use crate::mtp::MtpHead;
use crate::registry::spec_for;
use crate::weights::Loader;
use std::path::{Path, PathBuf};
use tf_backend::Backend;
use tf_core::regular_file::{present, read_regular};
use tf_core::{LoadProgress, Vocab};
use tf_formats::Checkpoint;
use tf_tokenize::Tokenizer;

/// A model ready to run: decoder weights on a backend, its vocabulary, tokenizer and stop ids.
pub struct Model<B: Backend> {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// The decoder.
    pub decoder: Decoder<B>,
    /// Embedding rows: the boundary every outside id is checked against.
    pub vocab: Vocab,
    /// The tokenizer, when the directory has one.
    pub tokenizer: Option<Tokenizer>,
    /// Ids that end generation (generation config, config, tokenizer).
    pub eos_ids: Vec<u32>,
    /// The BOS id, if any.
    pub bos_id: Option<u32>,
    /// Identity of the checkpoint (config and weights), for saved state.
    pub fingerprint: u64,
}

impl<B: Backend> Model<B> {
    /// Loads and validates a checkpoint onto `backend`: a GGUF file (told by its magic) or a
    /// Hugging Face directory; anything else is refused saying what the path holds.
    pub fn open(path: &Path, backend: &B) -> Result<Model<B>, ModelError> {
        Model::open_with_progress(path, backend, &LoadProgress::default())
    }

    /// [`Model::open`], counting the tensors and bytes loaded in `progress` (marked finished
    /// at the end, loaded or refused).
    pub fn open_with_progress(path: &Path, backend: &B, progress: &LoadProgress) -> Result<Model<B>, ModelError> {
        let loaded = match crate::locate::locate(path) {
            Ok(crate::locate::ModelPath::Gguf) => Model::open_gguf(path, backend, progress),
            Ok(crate::locate::ModelPath::HfDir) => Model::open_dir(path, backend, progress),
            Err(e) => Err(e),
        };
        progress.finish();
        loaded
    }

    /// Loads a GGUF file: config, vocabulary and stop ids from its metadata, weights mapped
    /// onto the Hugging Face names (quantized weights stay quantized).
    pub fn open_gguf(path: &Path, backend: &B, progress: &LoadProgress) -> Result<Model<B>, ModelError> {
        let src = GgufSource::open(path)?;
        let config = gguf::raw_config(src.file())?;
        limits::check(&config, &TensorBounds::of(src.file().tensors().iter().map(|t| t.shape.as_slice())))?;
        let spec = spec_for(&config)?;
        let vocab = Vocab::new(spec.vocab_size).ok_or_else(|| config.error("vocab_size must be positive"))?;
        let tokenizer = Some(tf_tokenize::tokenizer_from_gguf(src.file(), vocab)?);
        let mut eos_ids = Vec::new();
        for id in gguf::eog_token_ids(src.file())? {
            eos_ids.push(special(&config, vocab, "eos_token_id", id)?);
        }
        let bos_id = match config.ids("bos_token_id")?.first() {
            Some(&id) => Some(special(&config, vocab, "bos_token_id", id)?),
            None => None,
        };
        eos_ids.sort_unstable();
        eos_ids.dedup();
        let f = src.file();
        let sizes = f.tensors().iter().map(|t| f.tensor_data(t).len() as u64);
        progress.set_totals(f.tensors().len() as u64, sizes.sum());
        let fused = spec.fused.clone();
        let served = crate::fused::FusedSource::new(&src, &fused);
        let parts = f
            .tensors()
            .iter()
            .map(|t| Part { name: &t.name, kind: t.ggml_type.name(), shape: &t.shape, bytes: f.tensor_data(t) })
            .collect();
        let ld = Loader::new(&served, path, backend).with_progress(progress);
        let (decoder, fingerprint) = fingerprint::beside(f.header_bytes(), parts, || Decoder::load(spec, &ld))?;
        Ok(Model { dir: path.to_path_buf(), decoder, vocab, tokenizer, eos_ids, bos_id, fingerprint })
    }

    /// Loads a Hugging Face checkpoint directory.
    pub fn open_dir(dir: &Path, backend: &B, progress: &LoadProgress) -> Result<Model<B>, ModelError> {
        Model::open_dir_with(dir, backend, progress, None)
    }

    /// Loads rank `shard`'s part of a tensor-parallel model (`crate::tp`): a Hugging Face
    /// directory whose family `tp::check` accepts at the group's size; a GGUF file is refused.
    pub fn open_shard(
        path: &Path,
        backend: &B,
        progress: &LoadProgress,
        shard: crate::tp::Shard,
    ) -> Result<Model<B>, ModelError> {
        let loaded = match crate::locate::locate(path) {
            Ok(crate::locate::ModelPath::HfDir) => Model::open_dir_with(path, backend, progress, Some(shard)),
            Ok(crate::locate::ModelPath::Gguf) => Err(ModelError::Backend(tf_backend::BackendError::Unsupported(
                format!("{}: GGUF files are not sharded over tensor-parallel ranks yet", path.display()),
            ))),
            Err(e) => Err(e),
        };
        progress.finish();
        loaded
    }

    fn open_dir_with(
        dir: &Path,
        backend: &B,
        progress: &LoadProgress,
        shard: Option<crate::tp::Shard>,
    ) -> Result<Model<B>, ModelError> {
        let config_path = dir.join("config.json");
        let config_bytes = read_regular(&config_path)
            .map_err(|e| ModelError::Config { file: config_path.clone(), msg: format!("cannot read: {e}") })?;
        let config = crate::registry::text_config(RawConfig::from_bytes(&config_path, &config_bytes)?);
        let ckpt = Checkpoint::open(dir)?;
        let shapes = ckpt.files().iter().flat_map(|f| f.tensors().values().map(|t| t.shape.as_slice()));
        limits::check(&config, &TensorBounds::of(shapes))?;
        let spec = spec_for(&config)?;
        let vocab = Vocab::new(spec.vocab_size).ok_or_else(|| config.error("vocab_size must be positive"))?;
        let gen_path = dir.join("generation_config.json");
        let generation = if present(&gen_path) { Some(RawConfig::read(&gen_path)?) } else { None };
        let tokenizer =
            if present(&dir.join("tokenizer.json")) { Some(Tokenizer::from_dir(dir, vocab)?) } else { None };
        let mut eos_ids = Vec::new();
        let mut bos_id = None;
        for cfg in generation.iter().chain(std::iter::once(&config)) {
            for id in cfg.ids("eos_token_id")? {
                eos_ids.push(special(cfg, vocab, "eos_token_id", id)?);
            }
            for id in cfg.ids("bos_token_id")? {
                bos_id = bos_id.or(Some(special(cfg, vocab, "bos_token_id", id)?));
            }
            for id in cfg.ids("pad_token_id")? {
                special(cfg, vocab, "pad_token_id", id)?;
            }
        }
        if let Some(t) = &tokenizer {
            eos_ids.extend(t.eos_id());
            bos_id = bos_id.or(t.bos_id());
        }
        eos_ids.sort_unstable();
        eos_ids.dedup();
        let tensors =
            ckpt.files().iter().flat_map(|f| f.tensors().values().map(move |t| f.tensor_data(t).len() as u64));
        let (count, bytes) = tensors.fold((0, 0), |(n, b), len| (n + 1, b + len));
        progress.set_totals(count, bytes);
        let fp8 = crate::quant_config::fp8_config(&config)?;
        let fused = spec.fused.clone();
        let src = crate::fused::FusedSource::new(&ckpt, &fused);
        let ld = Loader::new(&src, dir, backend).with_progress(progress).with_fp8(fp8).with_shard(shard);
        let parts = ckpt
            .files()
            .iter()
            .flat_map(|f| f.tensors().iter().map(move |(name, t)| (f, name, t)))
            .map(|(f, name, t)| {
                let kind = t.dtype.as_ref().map_or_else(String::as_str, |d| d.name());
                Part { name, kind, shape: &t.shape, bytes: f.tensor_data(t) }
            })
            .collect();
        let (decoder, fingerprint) = fingerprint::beside(&config_bytes, parts, || Decoder::load(spec, &ld))?;
        Ok(Model { dir: dir.to_path_buf(), decoder, vocab, tokenizer, eos_ids, bos_id, fingerprint })
    }

    /// LongRoPE's choice for an engine whose sequences hold up to `context` tokens: past the
    /// original context its long factors replace the short ones the model loaded with (once,
    /// before any round; as llama.cpp chooses by its context size), and the fingerprint then
    /// names the long ones, so state saved under one choice is never restored under the other.
    /// Any other model is left as it is. Returns whether the long factors were put in place.
    pub fn fit_context(&mut self, context: usize) -> bool {
        let spec = &mut self.decoder.spec;
        let Some(long) = spec.long_rope.take_if(|l| context > l.original) else { return false };
        spec.rope_full = long.long.clone();
        spec.rope_sliding = long.long;
        self.fingerprint = fingerprint::with_tag(self.fingerprint, b"longrope: long factors");
        true
    }

    /// Loads the multi-token-prediction head its checkpoint holds beside the decoder
    /// (`crate::mtp`) onto `backend`, unsharded (with the whole head where the decoder is
    /// sharded): the drafter of `--draft mtp`. A checkpoint without one is refused by name (a
    /// GGUF file has one where its config counts `nextn_predict_layers` blocks and the family
    /// maps their `nextn.*` tensors: GLM-4.5's, GLM-5's, Qwen3.5's and Qwen3-Next's).
    pub fn load_mtp(&self, backend: &B) -> Result<MtpHead<B>, ModelError> {
        if crate::locate::locate(&self.dir)? == crate::locate::ModelPath::Gguf {
            let src = GgufSource::open(&self.dir)?;
            return MtpHead::load(&self.decoder.spec, &Loader::new(&src, &self.dir, backend));
        }
        let config = RawConfig::read(&self.dir.join("config.json"))?;
        let ckpt = Checkpoint::open(&self.dir)?;
        let fp8 = crate::quant_config::fp8_config(&config)?;
        let ld = Loader::new(&ckpt, &self.dir, backend).with_fp8(fp8);
        let mut head = MtpHead::load(&self.decoder.spec, &ld)?;
        // Sharded, the target's head is split over the ranks: the drafter (rank 0's alone,
        // unsharded) keeps the whole of it.
        if self.decoder.tp_size() > 1 {
            head.own_target_head(&self.decoder.spec, &ld)?;
        }
        Ok(head)
    }
}

fn special(cfg: &RawConfig, vocab: Vocab, field: &str, id: i64) -> Result<u32, ModelError> {
    vocab
        .check_one(id)
        .map_err(|_| cfg.error(format!("'{field}' {id} is outside the embedding table's {} rows", vocab.rows())))
}
