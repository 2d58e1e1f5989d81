//! The shared decoder every family runs: the embedding, a stack of blocks (blocks/), the final
//! norm and head, over `Backend` ops only. Shapes in comments are `(rows, cols)`.

use crate::blocks::per_layer::PerLayer;
use crate::blocks::{Block, CacheCounts, Caches};
use crate::cache::{Cache, CacheKind};
use crate::error::ModelError;
use crate::spec::ModelSpec;
use crate::tp::{Pass, Plan, RoundPlan, TpLink};
use crate::weights::Loader;
use std::sync::Arc;
use tf_backend::{AttnMeta, Backend, KvShape, Round, StateShape};

/// One round's flat batch: ids of every advanced token, attention metadata, rows to project.
pub struct Batch<'a, H = ()> {
    /// Token ids in row order (already checked at the boundary); with `held`, each row's index
    /// into the ids held there.
    pub ids: &'a [u32],
    /// Ids an earlier round picked, still on the backend ([`Backend::argmax_rows_held`]): row
    /// `i`'s token is `held[ids[i]]` (made by the engine, in range by construction).
    pub held: Option<&'a H>,
    /// Sequences, positions and KV slots.
    pub meta: &'a AttnMeta,
    /// Rows whose logits are wanted.
    pub logits_rows: &'a [usize],
}

/// A loaded decoder on backend `B`.
pub struct Decoder<B: Backend> {
    /// What was loaded.
    pub spec: ModelSpec,
    embed: B::Mat,
    lm_head: Option<B::Mat>,
    norm: B::Vec,
    layers: Vec<Block<B>>,
    /// Per-layer inputs and layer scalars (Gemma 4), where the spec has them.
    per_layer: Option<PerLayer<B>>,
    /// `(KV heads, head width)` of each KV pool, in pool order.
    kv_shapes: Vec<(usize, usize)>,
    /// The backend's identity for these weights (`Round::model`).
    id: u64,
    /// Whether a forward reads the host only through its `Round` (`Round::replayable`): no
    /// sliding windows (experts route on the backend; a backend whose expert path must read the
    /// host for a round spoils that round's recording and runs it op by op).
    replayable: bool,
    /// The tensor-parallel group of a sharded load: rank 0 sends each round's plan before
    /// running it, and gathers the vocabulary-parallel head's logits.
    tp: Option<Arc<TpLink>>,
    /// Query heads per KV head on this rank (`Round::group`).
    group: usize,
}

impl<B: Backend> Decoder<B> {
    /// Loads and validates every tensor the spec needs.
    pub fn load(spec: ModelSpec, ld: &Loader<'_, B>) -> Result<Decoder<B>, ModelError> {
        let (vocab, hidden) = (spec.vocab_size, spec.hidden_size);
        if let Some(sh) = ld.shard() {
            crate::tp::check(&spec, sh.size(), sh.expert_parallel)?;
        }
        let embed = ld.mat(spec.names.embed, vocab, hidden)?;
        // Sharded, each rank holds its part of the vocabulary's head rows (tied: of the table).
        let lm_head = match (spec.tie_word_embeddings, ld.shard()) {
            (true, None) => None,
            (true, Some(_)) => Some(ld.mat_split_rows(spec.names.embed, vocab, hidden, 1)?),
            (false, _) => Some(ld.mat_split_rows(spec.names.lm_head, vocab, hidden, 1)?),
        };
        let norm = ld.vec(spec.names.final_norm, hidden)?;
        let mut n = CacheCounts::default();
        let layers: Vec<Block<B>> =
            (0..spec.num_layers).map(|i| Block::load(&spec, ld, i, &mut n)).collect::<Result<_, _>>()?;
        let per_layer = PerLayer::load(&spec, ld)?;
        ld.refuse_unused(spec.tie_word_embeddings.then_some(spec.names.lm_head), &spec.unread_prefixes)?;
        let replayable = layers.iter().all(|l| l.replayable()) && per_layer.is_none();
        // The attention pools, then the indexer-key pools (of the attention pools' shape).
        let index_shapes = std::iter::repeat_n((spec.num_kv_heads, spec.head_dim), spec.index_pools());
        let kv_shapes = (0..spec.num_layers)
            .filter(|&i| matches!(layers[i].cache(), CacheKind::Kv(_)))
            .map(|i| spec.attn_shape(i))
            .map(|(kv_heads, d)| (ld.kv_part(kv_heads).len(), d))
            .chain(index_shapes)
            .collect();
        let tp = ld.shard().map(|sh| sh.link.clone());
        let group = ld.part(spec.num_heads).len() / ld.kv_part(spec.num_kv_heads).len().max(1);
        let id = ld.fresh_id();
        Ok(Decoder { spec, embed, lm_head, norm, layers, per_layer, kv_shapes, id, replayable, tp, group })
    }

    /// The first failure of its tensor-parallel group, if any (after which its outputs are
    /// not to be used).
    pub fn fault(&self) -> Option<String> {
        self.tp.as_ref().and_then(|t| t.fault())
    }

    /// Ranks its weights are sharded over (1 unsharded).
    pub fn tp_size(&self) -> usize {
        self.tp.as_ref().map_or(1, |t| t.group().size())
    }

    /// The tensor-parallel link, where sharded.
    pub(crate) fn tp_link(&self) -> Option<&Arc<TpLink>> {
        self.tp.as_ref()
    }

    /// On rank 0 of a group, sends `plan` to the other ranks.
    pub(crate) fn announce(&self, plan: impl FnOnce() -> Plan) {
        if let Some(t) = self.tp.as_ref().filter(|t| t.is_leader()) {
            t.send_plan(&plan().encode());
        }
    }

    /// The plan of round `batch` in pass `pass`: its ids resolved on the host.
    fn round_plan(&self, b: &B, batch: &Batch<'_, B::Held>, pass: Pass) -> Plan {
        let ids = match batch.held {
            Some(held) => {
                let held = b.held_ids(held);
                batch.ids.iter().map(|&i| held[i as usize]).collect()
            }
            None => batch.ids.to_vec(),
        };
        Plan::Round(RoundPlan {
            pass,
            ids,
            logits_rows: batch.logits_rows.to_vec(),
            block_size: batch.meta.block_size,
            seqs: batch.meta.seqs.clone(),
            state_slots: batch.meta.state_slots.clone(),
        })
    }

    /// The cache pools: a KV pool of `num_blocks` blocks of `block_size` tokens per attention
    /// layer, and `num_slots` state slots per recurrent layer.
    pub fn alloc_cache(
        &self,
        b: &B,
        num_blocks: usize,
        block_size: usize,
        num_slots: usize,
    ) -> Result<Cache<B>, ModelError> {
        self.announce(|| Plan::Alloc { num_blocks, block_size, num_slots });
        let latent = self.spec.mla.is_some();
        let kv = (self.kv_shapes.iter())
            .map(|&(num_kv_heads, head_dim)| {
                Ok(b.kv(KvShape { num_blocks, block_size, num_kv_heads, head_dim, latent })?)
            })
            .collect::<Result<_, ModelError>>()?;
        let state =
            self.state_shapes(num_slots).into_iter().map(|s| Ok(b.state(s)?)).collect::<Result<_, ModelError>>()?;
        Ok(Cache { kv, state })
    }

    /// Copies state slot `from` to `to` for each of `copies` in order, in every state pool (on
    /// every rank of a tensor-parallel group).
    pub fn copy_state(&self, b: &B, cache: &mut Cache<B>, copies: &[(u32, u32)]) {
        if copies.is_empty() {
            return;
        }
        self.announce(|| Plan::CopyState(copies.to_vec()));
        for &(from, to) in copies {
            for st in &mut cache.state {
                b.copy_state(st, from, to);
            }
        }
    }

    /// The shape of each recurrent layer's state pool with `num_slots` slots, in layer order.
    pub fn state_shapes(&self, num_slots: usize) -> Vec<StateShape> {
        self.layers.iter().filter_map(|l| l.state_shape(num_slots)).collect()
    }

    /// The cache each layer owns, in layer order, then one `Kv` per indexer-key pool (MiniMax
    /// M3's, after the attention pools): the `Kv` entries count `Cache::kv`'s pools, which a
    /// session saves and restores alike.
    pub fn cache_kinds(&self) -> Vec<CacheKind> {
        let first = self.kv_shapes.len() - self.spec.index_pools();
        let index = (first..self.kv_shapes.len()).map(CacheKind::Kv);
        self.layers.iter().map(|l| l.cache()).chain(index).collect()
    }

    /// Bytes of KV cache per token in pools of `kv_dtype` (the backend's `kv_dtype()`): K and
    /// V, or the latent row alone (MLA).
    pub fn kv_bytes_per_token(&self, kv_dtype: tf_core::DType) -> usize {
        let parts = if self.spec.mla.is_some() { 1 } else { 2 };
        parts * self.kv_shapes.iter().map(|(h, d)| kv_dtype.kv_bytes(h * d)).sum::<usize>()
    }

    /// Each KV pool's slot width (`KV heads * head width`: the values K, or V, holds per token),
    /// in the order of `Cache::kv` (Gemma 4's full layers are wider than its sliding ones).
    pub fn kv_widths(&self) -> Vec<usize> {
        self.kv_shapes.iter().map(|(h, d)| h * d).collect()
    }

    /// Bytes of state one sequence holds (every recurrent layer's slot, f32).
    pub fn state_bytes_per_seq(&self) -> usize {
        self.state_shapes(1).iter().map(|s| s.slot_bytes()).sum()
    }

    /// Runs one round; returns logits `(logits_rows, vocab)`.
    pub fn forward(&self, b: &B, batch: &Batch<'_, B::Held>, cache: &mut Cache<B>) -> B::Act {
        self.announce(|| self.round_plan(b, batch, Pass::Full));
        self.run_pass(b, batch, cache, self.layers.len())
    }

    /// Runs only the first `num_layers` layers, then the final norm and head (early-exit
    /// drafting); their K/V land in the same pools as a full forward would put them.
    pub fn forward_layers(&self, b: &B, batch: &Batch<'_, B::Held>, cache: &mut Cache<B>, num_layers: usize) -> B::Act {
        self.announce(|| self.round_plan(b, batch, Pass::Layers(num_layers)));
        self.run_pass(b, batch, cache, num_layers)
    }

    /// The first `num_layers` layers, the final norm and head of round `batch` (no plan sent).
    pub(crate) fn run_pass(
        &self,
        b: &B,
        batch: &Batch<'_, B::Held>,
        cache: &mut Cache<B>,
        num_layers: usize,
    ) -> B::Act {
        let h = self.residual(b, batch, cache, num_layers);
        self.head(b, &h, batch.logits_rows)
    }

    /// [`Decoder::forward`], and the final norm's output on every row `(tokens, hidden)`: the
    /// hidden states an MTP head reads (`crate::mtp`). The logits are the same bits as
    /// `forward`'s.
    pub fn forward_hidden(&self, b: &B, batch: &Batch<'_, B::Held>, cache: &mut Cache<B>) -> (B::Act, B::Act) {
        self.announce(|| self.round_plan(b, batch, Pass::Hidden));
        self.run_hidden(b, batch, cache)
    }

    /// [`Decoder::forward_hidden`] without a plan sent.
    pub(crate) fn run_hidden(&self, b: &B, batch: &Batch<'_, B::Held>, cache: &mut Cache<B>) -> (B::Act, B::Act) {
        let h = self.residual(b, batch, cache, self.layers.len());
        let s = &self.spec;
        let normed = b.rms_norm(&h, &self.norm, s.rms_norm_eps, s.norm_one_plus);
        (self.head(b, &h, batch.logits_rows), normed)
    }

    /// The embedding table.
    pub(crate) fn embed_table(&self) -> &B::Mat {
        &self.embed
    }

    /// The head's weight (the embedding table where it is tied).
    pub(crate) fn head_weight(&self) -> &B::Mat {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// The residual stream after the first `num_layers` layers of round `batch`.
    fn residual(&self, b: &B, batch: &Batch<'_, B::Held>, cache: &mut Cache<B>, num_layers: usize) -> B::Act {
        let positions = batch.meta.positions();
        let round = Round {
            replayable: self.replayable,
            model: [self.id, num_layers as u64],
            ids: batch.ids,
            held: batch.held,
            positions: &positions,
            meta: batch.meta,
            group: self.group,
        };
        let state = &mut cache.state;
        b.forward_round(&round, &mut cache.kv, &mut |r, kv| {
            self.run_layers(b, r, &mut Caches { kv, state: &mut state[..], shared: Vec::new() }, num_layers)
        })
    }

    /// The embedding and the first `num_layers` layers over round `r`: the residual stream after them.
    fn run_layers(&self, b: &B, r: &Round<'_, B::Held>, cache: &mut Caches<'_, B>, num_layers: usize) -> B::Act {
        let s = &self.spec;
        let mut h = match r.held {
            Some(held) => b.embed_held(&self.embed, held, r.ids, s.embed_scale),
            None => b.embed(&self.embed, r.ids, s.embed_scale),
        }; // (tokens, hidden)
        // A block's MLP output goes into h in its down projection's store, or (sandwich norms,
        // experts) through the next block's fused add + input norm.
        let mut pending: Option<B::Act> = None;
        let per_layer_inputs = self.per_layer.as_ref().map(|p| p.inputs(b, r, &h)).unwrap_or_default();
        for (i, layer) in self.layers.iter().take(num_layers).enumerate() {
            pending = layer.run(b, s, &mut h, pending.take(), r.positions, r.meta, cache);
            if let Some(p) = &self.per_layer {
                if let Some(f) = pending.take() {
                    b.add_assign(&mut h, &f);
                }
                p.after(b, s, i, &mut h, &per_layer_inputs);
            }
        }
        if let Some(f) = pending {
            b.add_assign(&mut h, &f);
        }
        h
    }

    /// The final norm and the head on rows `logits_rows` of the residual stream `h`.
    fn head(&self, b: &B, h: &B::Act, logits_rows: &[usize]) -> B::Act {
        let s = &self.spec;
        // Every row in order (a decode round): the rows as they are, no gather (on the GPU it
        // costs an upload and a kernel a round).
        let picked;
        let h = if logits_rows.iter().copied().eq(0..b.shape(h).0) {
            h
        } else {
            picked = b.select_rows(h, logits_rows);
            &picked
        };
        let head = self.head_weight();
        let mut logits = b
            .norm_matmul_many(h, &self.norm, s.rms_norm_eps, s.norm_one_plus, &[head])
            .pop()
            .unwrap_or_else(|| unreachable!("one weight, one output")); // (rows, vocab)
        if let Some(cap) = s.final_softcap {
            b.softcap(&mut logits, cap);
        }
        match &self.tp {
            Some(t) => t.gather_cols(b, logits, s.vocab_size),
            None => logits,
        }
    }
}
