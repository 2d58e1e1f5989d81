//! The Gemma 4 assistant (`Gemma4AssistantForCausalLM`, `gemma4_assistant`), a drafter for a
//! Gemma 4 target: a small `gemma4_text` stack whose layers are all KV-shared, each reading the
//! target's K/V of the target's last non-shared layer of its kind (full or sliding) and writing
//! none. A draft step at position `p` (the last token's, whose K/V the target has not written)
//! feeds `pre_projection(concat(target embedding of the token (scaled), h))`, where `h` is the
//! target's final hidden row at `p - 1` (after its final norm) on the first step and the
//! previous step's `post_projection(last_hidden_state)` after it; the position stays `p`. Its
//! queries see the target's positions `0..p` (full layers) or the last `sliding_window + 1` of
//! them (sliding layers: transformers' bidirectional window `|q - k| <= W`, flipped to look
//! back). Logits come from its own head (tied to its `model.embed_tokens`), or with
//! `use_ordered_embeddings` only the tokens of the `centroid_intermediate_top_k` best centroids
//! (`masked_embedding`: `token_ordering` lists each centroid's tokens) keep theirs and every
//! other token gets their minimum less 1 (per row; transformers takes the minimum over the
//! batch). The drafts are the argmax; what they are changes speed only.

use crate::blocks::per_layer::PerLayer;
use crate::blocks::{Block, CacheCounts, Caches};
use crate::cache::CacheKind;
use crate::config::RawConfig;
use crate::decoder::Decoder;
use crate::error::ModelError;
use crate::families::gemma4;
use crate::spec::ModelSpec;
use crate::weights::Loader;
use std::path::Path;
use tf_backend::{AttnMeta, Backend, RowQuery, SeqAttn, TokenMask};
use tf_formats::Checkpoint;

/// The `model_type` of an assistant checkpoint's config.
pub const MODEL_TYPE: &str = "gemma4_assistant";

/// The ordered-embedding head (`masked_embedding`).
struct Ordered<B: Backend> {
    /// `centroids` `[num_centroids, hidden]`.
    centroids: B::Mat,
    /// `token_ordering`: centroid `c`'s tokens are `[c * per_centroid, (c + 1) * per_centroid)`.
    ordering: Vec<u32>,
    /// Centroids kept per row.
    top_k: usize,
    /// Tokens per centroid (`vocab / num_centroids`).
    per_centroid: usize,
}

/// A loaded assistant, checked against its target.
pub struct Gemma4Assistant<B: Backend> {
    /// Its text stack (every layer `kv_read_only`, the sliding window one wider).
    spec: ModelSpec,
    layers: Vec<Block<B>>,
    /// Its layer scalars.
    per_layer: Option<PerLayer<B>>,
    norm: B::Vec,
    /// The head (`model.embed_tokens`, tied, else `lm_head`) `[vocab, hidden]`.
    head: B::Mat,
    /// `pre_projection` `[hidden, 2 * backbone]`.
    pre: B::Mat,
    /// `post_projection` `[backbone, hidden]`.
    post: B::Mat,
    ordered: Option<Ordered<B>>,
}

/// Whether `dir`'s config.json names a Gemma 4 assistant (`model_type` `gemma4_assistant`).
pub fn is_assistant(dir: &Path) -> bool {
    RawConfig::read(&dir.join("config.json")).is_ok_and(|c| c.opt_str("model_type") == Some(MODEL_TYPE))
}

impl<B: Backend> Gemma4Assistant<B> {
    /// Loads the assistant checkpoint `dir` onto `backend` beside `target`: its config must be a
    /// Gemma 4 assistant's (all layers shared, no per-layer inputs, MoE or wide MLPs), its
    /// vocabulary the target's, `backbone_hidden_size` the target's hidden size, each layer's
    /// kind present among the target's non-shared layers with the same KV heads and head width;
    /// every tensor is read, each of the shape its config gives. Refused by name otherwise.
    pub fn open(dir: &Path, target: &Decoder<B>, backend: &B) -> Result<Gemma4Assistant<B>, ModelError> {
        backend.check_attention_cached()?;
        let config = RawConfig::read(&dir.join("config.json"))?;
        if config.opt_str("model_type") != Some(MODEL_TYPE) {
            return Err(config.error(format!("model_type must be {MODEL_TYPE}, a Gemma 4 assistant's")));
        }
        let t = &target.spec;
        if !matches!(t.architecture.as_str(), "Gemma4ForCausalLM" | "gemma4_text") {
            return Err(
                config.error(format!("a Gemma 4 assistant drafts for a Gemma 4 target, not {}", t.architecture))
            );
        }
        let text = config.nested("text_config").ok_or_else(|| config.error("no text_config object"))?;
        let spec = text_spec(&text)?;
        let backbone = config.dim("backbone_hidden_size")?;
        if backbone != t.hidden_size {
            return Err(config.error(format!(
                "backbone_hidden_size {backbone} differs from the target's hidden_size {}",
                t.hidden_size
            )));
        }
        if spec.vocab_size != t.vocab_size {
            return Err(config.error(format!(
                "text_config.vocab_size {} differs from the target's vocab_size {}",
                spec.vocab_size, t.vocab_size
            )));
        }
        let pools = source_pools(&spec, target).map_err(|m| config.error(m))?;
        let ckpt = Checkpoint::open(dir)?;
        let ld = Loader::new(&ckpt, dir, backend);
        let (hidden, vocab) = (spec.hidden_size, spec.vocab_size);
        let mut n = CacheCounts::default();
        let mut layers = Vec::with_capacity(spec.num_layers);
        for (i, &pool) in pools.iter().enumerate() {
            n.kv = pool;
            layers.push(Block::load(&spec, &ld, i, &mut n)?);
        }
        let per_layer = PerLayer::load(&spec, &ld)?;
        let tied = config.flag("tie_word_embeddings", true)?;
        let head = ld.mat(if tied { spec.names.embed } else { spec.names.lm_head }, vocab, hidden)?;
        let ordered = match config.flag("use_ordered_embeddings", false)? {
            false => None,
            true => Some(ordered_head(&config, &ld, vocab, hidden)?),
        };
        let me = Gemma4Assistant {
            norm: ld.vec(spec.names.final_norm, hidden)?,
            pre: ld.mat("pre_projection.weight", hidden, 2 * backbone)?,
            post: ld.mat("post_projection.weight", backbone, hidden)?,
            head,
            ordered,
            layers,
            per_layer,
            spec,
        };
        // The K/V projections transformers builds no module for, and an untied head's
        // embedding table (the target's embeds the tokens).
        let mut unread: Vec<String> = (0..me.spec.num_layers)
            .flat_map(|i| ["k_proj", "v_proj", "k_norm", "v_norm"].map(|m| format!("model.layers.{i}.self_attn.{m}.")))
            .collect();
        if !tied {
            unread.push(me.spec.names.embed.to_string());
        }
        ld.refuse_unused(tied.then_some("lm_head.weight"), &unread)?;
        Ok(me)
    }

    /// The attention metadata of one draft step: one row per sequence, row `i` at position
    /// `seqs[i].0` (at least 1) reading the target's positions before it through the block table
    /// `seqs[i].1` of the target's pools. Nothing is written, so no slots are mapped.
    pub fn step_meta(seqs: Vec<(usize, Vec<u32>)>, block_size: usize) -> AttnMeta {
        let seqs = (seqs.into_iter().enumerate())
            .map(|(row, (p, block_table))| SeqAttn { q_start: row, q_len: 1, start_pos: p - 1, block_table })
            .collect();
        AttnMeta { seqs, slot_mapping: Vec::new(), block_size, state_slots: Vec::new() }
    }

    /// One draft step of every row: row `i` feeds token `ids[i]` at position `positions[i]` and
    /// `hidden`'s row `i` (`(rows, target hidden)`), attending over `pools` (the target's
    /// `Cache::kv`, read and never written) as `meta` ([`Gemma4Assistant::step_meta`]) says.
    /// Returns each row's logits on the host (`(rows, vocab)`, masked where the head is ordered)
    /// and the hidden rows the next step feeds (`(rows, target hidden)`).
    #[allow(clippy::too_many_arguments)]
    pub fn step(
        &self,
        b: &B,
        target: &Decoder<B>,
        ids: &[u32],
        positions: &[u32],
        hidden: &B::Act,
        meta: &AttnMeta,
        pools: &mut [B::Kv],
    ) -> (Vec<f32>, B::Act) {
        let (normed, next) = self.step_rows(b, target, ids, positions, hidden, meta, pools);
        let vocab = self.spec.vocab_size;
        let Some(kept) = self.ordered.as_ref().map(|o| o.kept_rows(b, &normed)) else {
            return (b.download(&b.matmul(&normed, &self.head)), next);
        };
        // The kept tokens' logits alone where the backend makes them for less than the whole
        // head (`Backend::matmul_picked`), else read out of the whole head's.
        let values = self.picked(b, &normed, &kept).unwrap_or_else(|| {
            let logits = b.download(&b.matmul(&normed, &self.head));
            kept.iter().zip(logits.chunks_exact(vocab)).map(|(k, row)| k.iter().map(|&t| row[t]).collect()).collect()
        });
        let mut logits = vec![0.0f32; kept.len() * vocab];
        for ((row, kept), values) in logits.chunks_exact_mut(vocab).zip(&kept).zip(&values) {
            Ordered::<B>::fill(row, kept, values);
        }
        (logits, next)
    }

    /// The logits of each row's `kept` tokens alone, where the backend makes those for less than
    /// the whole head (`Backend::matmul_picked`).
    fn picked(&self, b: &B, normed: &B::Act, kept: &[Vec<usize>]) -> Option<Vec<Vec<f32>>> {
        let picks: Vec<Vec<u32>> = kept.iter().map(|k| k.iter().map(|&t| t as u32).collect()).collect();
        b.matmul_picked(normed, &self.head, &picks)
    }

    /// [`Gemma4Assistant::step`]'s draft tokens: each row's first largest logit (among its kept
    /// tokens where the head is ordered), picked where the logits are, so only the ids (and an
    /// ordered head's centroid logits) cross to the host on a device that picks in place.
    #[allow(clippy::too_many_arguments)]
    pub fn step_ids(
        &self,
        b: &B,
        target: &Decoder<B>,
        ids: &[u32],
        positions: &[u32],
        hidden: &B::Act,
        meta: &AttnMeta,
        pools: &mut [B::Kv],
    ) -> (Vec<u32>, B::Act) {
        let (normed, next) = self.step_rows(b, target, ids, positions, hidden, meta, pools);
        let Some(kept) = self.ordered.as_ref().map(|o| o.kept_rows(b, &normed)) else {
            return (b.argmax_rows_in_round(&b.matmul(&normed, &self.head)), next);
        };
        if let Some(values) = self.picked(b, &normed, &kept) {
            // The first largest logit, ties to the lower token (as a masked argmax takes it).
            let best = |(kept, values): (&Vec<usize>, &Vec<f32>)| {
                let pairs = kept.iter().zip(values);
                pairs.fold(None, |best: Option<(usize, f32)>, (&t, &v)| match best {
                    Some((bt, bv)) if v.is_nan() || bv > v || (bv == v && bt < t) => Some((bt, bv)),
                    _ => Some((t, v)),
                })
            };
            let ids = kept.iter().zip(&values).map(|p| best(p).map_or(0, |(t, _)| t as u32)).collect();
            return (ids, next);
        }
        let mut logits = b.matmul(&normed, &self.head);
        let width = b.shape(&logits).1;
        let queries: Vec<RowQuery> = kept
            .into_iter()
            .map(|kept| RowQuery::greedy(Some(TokenMask::from_ids(width, kept.into_iter().map(|t| t as u32)))))
            .collect();
        let rows: Vec<usize> = (0..queries.len()).collect();
        let picks = b.sample_candidates(&mut logits, &rows, &queries);
        (picks.iter().map(|c| c.ids.first().copied().unwrap_or(0)).collect(), next)
    }

    /// The final-normed rows whose head gives the logits, and the hidden rows the next step feeds.
    #[allow(clippy::too_many_arguments)]
    fn step_rows(
        &self,
        b: &B,
        target: &Decoder<B>,
        ids: &[u32],
        positions: &[u32],
        hidden: &B::Act,
        meta: &AttnMeta,
        pools: &mut [B::Kv],
    ) -> (B::Act, B::Act) {
        let s = &self.spec;
        let e = b.embed(target.embed_table(), ids, target.spec.embed_scale);
        let mut x = b.matmul(&b.concat_heads(&e, hidden, 1), &self.pre);
        let mut caches = Caches { kv: pools, state: &mut [], shared: Vec::new() };
        let mut pending: Option<B::Act> = None;
        for (i, layer) in self.layers.iter().enumerate() {
            pending = layer.run(b, s, &mut x, pending.take(), positions, meta, &mut caches);
            if let Some(p) = &self.per_layer {
                if let Some(f) = pending.take() {
                    b.add_assign(&mut x, &f);
                }
                p.after(b, s, i, &mut x, &[]);
            }
        }
        if let Some(f) = pending {
            b.add_assign(&mut x, &f);
        }
        let normed = b.rms_norm(&x, &self.norm, s.rms_norm_eps, s.norm_one_plus);
        let next = b.matmul(&normed, &self.post);
        (normed, next)
    }
}

impl<B: Backend> Ordered<B> {
    /// Per row of `normed`, the tokens of its `top_k` best centroids (ties to the lower centroid).
    fn kept_rows(&self, b: &B, normed: &B::Act) -> Vec<Vec<usize>> {
        let centroids = b.download(&b.matmul(normed, &self.centroids));
        let num_centroids = centroids.len() / b.shape(normed).0.max(1);
        centroids
            .chunks_exact(num_centroids.max(1))
            .map(|c| {
                let mut order: Vec<usize> = (0..c.len()).collect();
                order.sort_by(|&a, &b| c[b].total_cmp(&c[a]).then(a.cmp(&b)));
                order[..self.top_k.min(c.len())]
                    .iter()
                    .flat_map(|&c| self.ordering[c * self.per_centroid..(c + 1) * self.per_centroid].iter())
                    .map(|&t| t as usize)
                    .collect()
            })
            .collect()
    }

    /// `row` with the `kept` tokens' logits `values` and every other token's their minimum
    /// less 1.
    fn fill(row: &mut [f32], kept: &[usize], values: &[f32]) {
        let fill = values.iter().copied().fold(f32::INFINITY, f32::min) - 1.0;
        row.fill(fill);
        for (&t, &v) in kept.iter().zip(values) {
            row[t] = v;
        }
    }
}

/// The spec of the assistant's text stack from its `text_config`, refusing what transformers'
/// `Gemma4AssistantConfig` refuses: per-layer inputs, the MoE block, wide MLPs, layers not all
/// KV-shared.
fn text_spec(text: &RawConfig) -> Result<ModelSpec, ModelError> {
    let layers = text.dim("num_hidden_layers")?;
    match text.get("num_kv_shared_layers").map(|v| v.as_u64()) {
        None | Some(Some(0)) => {}
        Some(Some(n)) if n as usize == layers => {}
        Some(_) => {
            return Err(text.error(format!(
                "text_config.num_kv_shared_layers must be num_hidden_layers {layers}: every assistant layer reads the target's K/V"
            )));
        }
    }
    if text.flag("use_double_wide_mlp", false)? {
        return Err(text.error("text_config.use_double_wide_mlp must be false in a Gemma 4 assistant"));
    }
    let mut spec = gemma4::spec(&text.without(&["num_kv_shared_layers"]), "gemma4_text")?;
    if spec.per_layer_input.is_some() {
        return Err(text.error("text_config.hidden_size_per_layer_input must be 0 in a Gemma 4 assistant"));
    }
    if spec.moe.is_some() {
        return Err(text.error("text_config.enable_moe_block must be false in a Gemma 4 assistant"));
    }
    spec.kv_read_only = true;
    // transformers' bidirectional sliding mask keeps `|q - k| <= W`: W + 1 keys, flipped to the
    // last W + 1 before the draft position.
    spec.sliding_window = spec.sliding_window.map(|w| w + 1);
    Ok(spec)
}

/// The target's KV pool each assistant layer reads: that of the target's last non-shared layer
/// of its kind, whose KV heads and head width must be the layer's; why not otherwise.
fn source_pools<B: Backend>(spec: &ModelSpec, target: &Decoder<B>) -> Result<Vec<usize>, String> {
    let t = &target.spec;
    let owners = t.kv_shared_from.unwrap_or(t.num_layers);
    let kinds = target.cache_kinds();
    (0..spec.num_layers)
        .map(|i| {
            let kind = spec.layer_kinds[i];
            let Some(j) = (0..owners).rev().find(|&j| t.layer_kinds[j] == kind) else {
                return Err(format!("assistant layer {i} is a {kind:?} layer and the target has no non-shared {kind:?} layer"));
            };
            if spec.attn_shape(i) != t.attn_shape(j) {
                return Err(format!(
                    "assistant layer {i} ({kind:?}) has (KV heads, head width) {:?}; the target's layer {j} it reads has {:?}",
                    spec.attn_shape(i),
                    t.attn_shape(j)
                ));
            }
            match kinds.get(j) {
                Some(CacheKind::Kv(pool)) => Ok(*pool),
                _ => Err(format!("the target's layer {j} owns no KV pool")),
            }
        })
        .collect()
}

/// The `masked_embedding` head of an ordered-embedding assistant.
fn ordered_head<B: Backend>(
    config: &RawConfig,
    ld: &Loader<'_, B>,
    vocab: usize,
    hidden: usize,
) -> Result<Ordered<B>, ModelError> {
    let num_centroids = config.dim("num_centroids")?;
    let top_k = config.dim("centroid_intermediate_top_k")?;
    if !vocab.is_multiple_of(num_centroids) || top_k > num_centroids {
        return Err(config.error(format!(
            "num_centroids {num_centroids} must divide vocab_size {vocab} and be at least centroid_intermediate_top_k {top_k}"
        )));
    }
    Ok(Ordered {
        centroids: ld.mat("masked_embedding.centroids.weight", num_centroids, hidden)?,
        ordering: ld.index_values("masked_embedding.token_ordering", vocab, vocab)?,
        top_k,
        per_centroid: vocab / num_centroids,
    })
}
