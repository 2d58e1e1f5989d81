//! Multi-token-prediction heads, read from the target's own checkpoint (DeepSeek V3's, GLM-4.x's
//! and Step 3.5 / 3.7's `num_nextn_predict_layers` layers at `model.layers.{num_hidden_layers}.`,
//! Qwen3.5's and Qwen3-Next's `mtp.*`; `MtpLayout` names them): at position `p` a head takes the
//! target's final hidden row there (after its final norm) and the embedding of the token at
//! `p + 1`, each behind its own norm (`hnorm` / `pre_fc_norm_hidden`, `enorm` /
//! `pre_fc_norm_embedding`), projects their concatenation, embedding first, back to the hidden
//! width (`eh_proj` / `fc`) and runs one decoder layer of the target's (full attention, or
//! Step's sliding kind where its config says so) over it with its own KV pool; its norm
//! (`shared_head.norm` / `mtp.norm`) and head (`shared_head.head`, else the target's) give
//! logits for the token at `p + 2`. The row standing in for the target's hidden row at the next
//! drafted position is the layer's output before that norm (NextN) or after it (Qwen, Step). The
//! embedding is the head's own where the checkpoint has one, else the target's. A drafter
//! proposes with it (the engine's `--draft mtp`); what it proposes changes speed only.

use crate::blocks::{Block, CacheCounts, Caches};
use crate::cache::Cache;
use crate::decoder::{Batch, Decoder};
use crate::error::ModelError;
use crate::spec::{LayerKind, ModelSpec, MtpLayout};
use crate::weights::Loader;
use tf_backend::{Backend, BackendError, KvShape, Round};

/// A loaded MTP head (one depth).
pub struct MtpHead<B: Backend> {
    /// The target's spec with the MTP layer at index `layer`.
    spec: ModelSpec,
    /// Where the next step's hidden row is taken.
    layout: MtpLayout,
    /// Its own embedding table, where the checkpoint has one.
    embed: Option<B::Mat>,
    enorm: B::Vec,
    hnorm: B::Vec,
    /// `(hidden, 2 * hidden)`: the normed embedding and hidden row, concatenated, to the hidden width.
    proj: B::Mat,
    block: Block<B>,
    norm: B::Vec,
    /// Its own head, where the checkpoint has one.
    head: Option<B::Mat>,
    /// `(KV heads, head width)` of its one KV pool.
    kv_shape: (usize, usize),
    /// The backend's identity for these weights.
    id: u64,
}

impl<B: Backend> MtpHead<B> {
    /// Loads the first MTP depth of a checkpoint whose decoder is `target` (every tensor under
    /// its prefix must be taken); refused by name where the checkpoint has none, or (but for
    /// Step's, whose first depth drafts) more than one depth.
    pub fn load(target: &ModelSpec, ld: &Loader<'_, B>) -> Result<MtpHead<B>, ModelError> {
        let unsupported = |msg: String| ModelError::Backend(BackendError::Unsupported(msg));
        let Some(m) = target.mtp else {
            return Err(unsupported(format!(
                "{} has no multi-token-prediction layers (num_nextn_predict_layers or mtp_num_hidden_layers is 0 or \
                 absent): --draft mtp needs a checkpoint that ships them",
                target.architecture
            )));
        };
        if let Some(why) = m.unsupported {
            return Err(unsupported(format!("{}: --draft mtp: {why}", target.architecture)));
        }
        if m.num_layers != 1 && m.layout != MtpLayout::Step {
            return Err(unsupported(format!(
                "{} MTP depths (num_nextn_predict_layers or mtp_num_hidden_layers): drafting reads one depth, and \
                 only a checkpoint of one is taken",
                m.num_layers
            )));
        }
        // The layer's prefix and index, and the names of the head's own tensors.
        let (layer, names) = match m.layout {
            MtpLayout::NextN | MtpLayout::Step => {
                (target.num_layers, ["enorm", "hnorm", "eh_proj", "shared_head.norm"])
            }
            MtpLayout::Qwen => (0, ["pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"]),
        };
        let mut spec = target.clone();
        spec.num_layers = layer + 1;
        spec.layer_kinds.resize(layer, LayerKind::Full);
        spec.layer_kinds.push(m.kind);
        // The full layers' query head count (no per-layer count reaches the MTP layer).
        spec.layer_heads.truncate(layer);
        if let Some(moe) = spec.moe.as_mut() {
            moe.sparse_layers.resize(layer, false);
            moe.sparse_layers.push(m.sparse);
        }
        // Step's depth 0 takes decoder layer 0's clamps; the others have none.
        let clamps = match m.layout {
            MtpLayout::Step => (target.mlp_clamp(0), target.expert_clamp(0)),
            MtpLayout::NextN | MtpLayout::Qwen => (None, None),
        };
        spec.mlp_clamp.resize(layer, None);
        spec.mlp_clamp.push(clamps.0);
        spec.expert_clamp.resize(layer, None);
        spec.expert_clamp.push(clamps.1);
        let head_prefix = match m.layout {
            MtpLayout::NextN | MtpLayout::Step => format!("{}{layer}.", spec.names.layers),
            MtpLayout::Qwen => {
                spec.names.layers = "mtp.layers.";
                "mtp.".to_string()
            }
        };
        let p = &head_prefix;
        let hidden = spec.hidden_size;
        let norm = |name: &str| ld.vec(&format!("{p}{name}.weight"), hidden);
        let own = |name: &str, required: bool| {
            let name = format!("{p}{name}.weight");
            (required || ld.has(&name)).then(|| ld.mat(&name, spec.vocab_size, hidden)).transpose()
        };
        let block = Block::load(&spec, ld, layer, &mut CacheCounts::default())?;
        let [e, h, proj, out_norm] = names;
        let head = MtpHead {
            embed: own("embed_tokens", m.own_embed)?,
            enorm: norm(e)?,
            hnorm: norm(h)?,
            proj: ld.mat(&format!("{p}{proj}.weight"), hidden, 2 * hidden)?,
            block,
            norm: norm(out_norm)?,
            head: own("shared_head.head", false)?,
            kv_shape: spec.attn_shape(layer),
            id: ld.fresh_id(),
            layout: m.layout,
            spec,
        };
        ld.refuse_unused_under(p)?;
        Ok(head)
    }

    /// Takes the target's whole head from the checkpoint as its own, where it has none: the
    /// drafter of a tensor-parallel target (on rank 0, unsharded) whose head each rank holds
    /// only a part of.
    pub(crate) fn own_target_head(&mut self, target: &ModelSpec, ld: &Loader<'_, B>) -> Result<(), ModelError> {
        if self.head.is_none() {
            let name = if target.tie_word_embeddings { target.names.embed } else { target.names.lm_head };
            self.head = Some(ld.mat(name, target.vocab_size, target.hidden_size)?);
        }
        Ok(())
    }

    /// Its KV pool of `num_blocks` blocks of `block_size` tokens.
    pub fn alloc_cache(&self, b: &B, num_blocks: usize, block_size: usize) -> Result<Cache<B>, ModelError> {
        let (num_kv_heads, head_dim) = self.kv_shape;
        let latent = self.spec.mla.is_some();
        let kv = vec![b.kv(KvShape { num_blocks, block_size, num_kv_heads, head_dim, latent })?];
        Ok(Cache { kv, state: Vec::new() })
    }

    /// Bytes of its KV cache per token in pools of `kv_dtype`.
    pub fn kv_bytes_per_token(&self, kv_dtype: tf_core::DType) -> usize {
        let parts = if self.spec.mla.is_some() { 1 } else { 2 };
        parts * kv_dtype.kv_bytes(self.kv_shape.0 * self.kv_shape.1)
    }

    /// The head over `batch`: row `i` at position `p` takes the token `batch.ids[i]` (the one at
    /// `p + 1`) and `hidden`'s row `i` (the target's final hidden row at `p`, or the head's own
    /// output at `p - 1` when drafting further). Returns the logits of `batch.logits_rows` and
    /// those rows' hidden rows for the next step (`MtpLayout` says which).
    pub fn forward(
        &self,
        b: &B,
        target: &Decoder<B>,
        batch: &Batch<'_, B::Held>,
        hidden: &B::Act,
        cache: &mut Cache<B>,
    ) -> (B::Act, B::Act) {
        let s = &self.spec;
        let (eps, one_plus) = (s.rms_norm_eps, s.norm_one_plus);
        let positions = batch.meta.positions();
        let round = Round {
            replayable: false,
            model: [self.id, 1],
            ids: batch.ids,
            held: None,
            positions: &positions,
            meta: batch.meta,
            group: s.num_heads / s.num_kv_heads.max(1),
        };
        let state = &mut cache.state;
        let h = b.forward_round(&round, &mut cache.kv, &mut |r, kv| {
            let table = self.embed.as_ref().unwrap_or(target.embed_table());
            let e = b.rms_norm(&b.embed(table, r.ids, s.embed_scale), &self.enorm, eps, one_plus);
            let g = b.rms_norm(hidden, &self.hnorm, eps, one_plus);
            let mut x = b.matmul(&b.concat_heads(&e, &g, 1), &self.proj);
            let mut caches = Caches { kv, state: &mut state[..], shared: Vec::new() };
            if let Some(f) = self.block.run(b, s, &mut x, None, r.positions, r.meta, &mut caches) {
                b.add_assign(&mut x, &f);
            }
            x
        });
        let rows = if batch.logits_rows.iter().copied().eq(0..b.shape(&h).0) {
            h
        } else {
            b.select_rows(&h, batch.logits_rows)
        };
        let head = self.head.as_ref().unwrap_or(target.head_weight());
        match self.layout {
            MtpLayout::NextN => {
                let logits = b
                    .norm_matmul_many(&rows, &self.norm, eps, one_plus, &[head])
                    .pop()
                    .unwrap_or_else(|| unreachable!("one weight, one output"));
                (logits, rows)
            }
            MtpLayout::Qwen | MtpLayout::Step => {
                let normed = b.rms_norm(&rows, &self.norm, eps, one_plus);
                (b.matmul(&normed, head), normed)
            }
        }
    }
}
