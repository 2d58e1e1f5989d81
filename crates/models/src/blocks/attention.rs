//! The attention token mixer (MHA / GQA, full or sliding, optional QK norm per head or over the
//! whole projection, optional soft-capped scores, output gate and q/k/v biases, an unscaled V
//! norm, V from the K projection, a head shape per layer): q, k and v from the block's normed
//! input (plus their biases), rotary embedding, paged attention, then `sigmoid(gate)` times the
//! output where the layer has a gate. A KV-shared layer (Gemma 4) has q alone and attends over
//! the K/V its source layer made this round, in the source's pool; a layer of a model reading
//! another's pools (`ModelSpec::kv_read_only`, the Gemma 4 assistant) has q alone and attends
//! over what that pool holds, writing none. gpt-oss's layers add per-head sink logits to each
//! softmax and a bias after the output projection (the block adds it).

use super::Caches;
use super::indexer::Indexer;
use crate::error::ModelError;
use crate::spec::{LayerKind, ModelSpec};
use crate::weights::Loader;
use tf_backend::{AttnMeta, AttnParams, Backend, QkNorm};

/// One layer's attention: its input projections, norms and shape; its KV pool is `kv`.
pub(crate) struct Attention<B: Backend> {
    pub(crate) q: B::Mat,
    /// The K and V projections; none in a KV-shared layer.
    pub(crate) kv_proj: Option<(B::Mat, B::Mat)>,
    /// The output gate's projection (`q_proj`'s second half per head), where the spec gates.
    pub(crate) gate: Option<B::Mat>,
    q_norm: Option<B::Vec>,
    k_norm: Option<B::Vec>,
    /// Ones of the head width: the unscaled per-head V norm, where the spec has one.
    v_norm: Option<B::Vec>,
    /// q, k and v biases (`attention_bias`).
    bias: Option<[B::Vec; 3]>,
    /// The output projection's bias (gpt-oss), added after it.
    pub(crate) out_bias: Option<B::Vec>,
    /// This rank's query heads' sink logits (gpt-oss), counted in each head's softmax.
    sinks: Option<Vec<f32>>,
    attn: AttnParams,
    pub(crate) sliding: bool,
    /// Index of this layer's pool in `Cache::kv` (a KV-shared layer's: its source's).
    pub(crate) kv: usize,
    /// The layer whose K/V this KV-shared layer reads.
    pub(crate) source: Option<usize>,
    /// This layer's index, where a later KV-shared layer reads its K/V (kept for the round).
    keep_as: Option<usize>,
    /// The lightning indexer of a block-sparse layer (MiniMax M3): each query attends only to
    /// the key blocks it chooses.
    pub(crate) indexer: Option<Indexer<B>>,
    /// The indexer heads this rank's query heads read, where sharded (the indexer whole on
    /// every rank).
    index_heads: Option<std::ops::Range<usize>>,
    /// The group a sharded layer's whole-row q / k norms sum their squares over.
    tp: Option<std::sync::Arc<crate::tp::TpLink>>,
}

impl<B: Backend> Attention<B> {
    /// Loads layer `i`'s attention (`{p}self_attn.*`, as `names` calls them) and its output projection.
    pub(crate) fn load(
        s: &ModelSpec,
        ld: &Loader<'_, B>,
        p: &str,
        i: usize,
        kv: usize,
    ) -> Result<(Self, B::Mat), ModelError> {
        let hidden = s.hidden_size;
        // The checkpoint's head counts, and this rank's (all of them without a shard).
        let (all_kv_heads, d) = s.attn_shape(i);
        let all_heads = s.heads(i);
        let (head_part, kv_part) = (ld.part(all_heads), ld.kv_part(all_kv_heads));
        let (heads, kv_heads) = (head_part.len(), kv_part.len());
        let m = s.names.attn;
        // Per head, or over all of q's (k's) heads where the spec says so.
        // Over all heads: this rank's heads' part of the weight (`TpLink::rms_norm_across`).
        let qk_norm = |name: &str, heads: usize, part: std::ops::Range<usize>| {
            let name = format!("{p}{m}.{name}.weight");
            match (s.qk_norm, s.qk_norm_full) {
                (false, _) => Ok(None),
                (true, true) => ld.vec_part(&name, heads * d, d, part).map(Some),
                (true, false) => ld.vec(&name, d).map(Some),
            }
        };
        // Cut by heads: heads `part`'s rows of a projection of `heads` heads.
        let head_rows = |name: &str, heads: usize, part: std::ops::Range<usize>| {
            ld.mat_part_rows(&format!("{p}{m}.{name}.weight"), heads * d, hidden, d, part)
        };
        let sliding = s.layer_kinds[i] == LayerKind::Sliding;
        let attn = AttnParams {
            num_heads: heads,
            num_kv_heads: kv_heads,
            head_dim: d,
            scale: s.attn_scale,
            window: if sliding { s.sliding_window } else { None },
            softcap: s.attn_softcap,
        };
        let (q, gate) = if s.attn_output_gate {
            // q_proj interleaves per head: the head's query rows, then its gate rows.
            let name = format!("{p}{m}.q_proj.weight");
            let rows = |off: usize| -> Vec<usize> {
                head_part.clone().flat_map(|h| h * 2 * d + off..h * 2 * d + off + d).collect()
            };
            let n = 2 * all_heads * d;
            (ld.mat_rows(&name, n, hidden, &rows(0))?, Some(ld.mat_rows(&name, n, hidden, &rows(d))?))
        } else if s.attn_head_gate {
            // One gate row per head, repeated over the head's width: the gate's matmul makes each
            // head's value once per output column (the same value), so `mul_sigmoid` applies it.
            let rows: Vec<usize> = head_part.clone().flat_map(|h| std::iter::repeat_n(h, d)).collect();
            // Checkpoints name it `gate_proj` (transformers loads it as `g_proj`).
            let name = ["gate_proj", "g_proj"].map(|n| format!("{p}{m}.{n}.weight"));
            let name = if ld.has(&name[0]) || !ld.has(&name[1]) { &name[0] } else { &name[1] };
            let g = ld.mat_rows(name, all_heads, hidden, &rows)?;
            (head_rows("q_proj", all_heads, head_part.clone())?, Some(g))
        } else {
            (head_rows("q_proj", all_heads, head_part.clone())?, None)
        };
        // Full layers with `full_v_from_k` have no `v_proj`: V is the K projection's output.
        let v_name = if s.full_v_from_k && !sliding { "k_proj" } else { "v_proj" };
        let source = s.kv_source(i);
        let owns = source.is_none() && !s.kv_read_only;
        let kv_proj = match owns {
            true => Some((
                head_rows("k_proj", all_kv_heads, kv_part.clone())?,
                head_rows(v_name, all_kv_heads, kv_part.clone())?,
            )),
            false => None,
        };
        let keep_as = (0..s.num_layers).any(|j| s.kv_source(j) == Some(i)).then_some(i);
        let indexer = match (&s.index, s.index_slot(i)) {
            (Some(x), Some((pool, in_v, col))) => Some(Indexer::load(s, x, ld, p, (s.attn_pools() + pool, in_v, col))?),
            _ => None,
        };
        let sinks = match s.attn_sinks {
            true => {
                ld.backend_ref().check_attention_sinks()?;
                let all = ld.host_values(&format!("{p}{m}.sinks"), &[all_heads])?;
                Some(all[head_part.clone()].to_vec())
            }
            false => None,
        };
        let out_bias = match s.attn_out_bias {
            true => Some(ld.vec(&format!("{p}{m}.{}.bias", s.names.attn_out), hidden)?),
            false => None,
        };
        let me = Attention {
            indexer,
            out_bias,
            sinks,
            q,
            gate,
            kv_proj,
            source,
            keep_as,
            bias: if s.attention_bias {
                let b = |name: &str, n, part| ld.vec_part(&format!("{p}{m}.{name}.bias"), n, d, part);
                let kvw = all_kv_heads * d;
                Some([
                    b("q_proj", all_heads * d, head_part.clone())?,
                    b("k_proj", kvw, kv_part.clone())?,
                    b("v_proj", kvw, kv_part.clone())?,
                ])
            } else {
                None
            },
            q_norm: qk_norm(s.names.qk_norm[0], all_heads, head_part.clone())?,
            k_norm: if owns { qk_norm(s.names.qk_norm[1], all_kv_heads, kv_part.clone())? } else { None },
            tp: ld.shard().map(|sh| sh.link.clone()),
            index_heads: match (&s.index, ld.shard()) {
                // Split like KV heads: evenly, or the one this rank's query heads read.
                (Some(x), Some(_)) => Some(ld.kv_part(x.num_heads)),
                _ => None,
            },
            v_norm: (s.v_norm && owns).then(|| ld.backend_vec(&vec![1.0; d])),
            attn,
            sliding,
            kv,
        };
        let out = ld.mat_split_cols(&format!("{p}{m}.{}.weight", s.names.attn_out), hidden, all_heads * d, d)?;
        Ok((me, out))
    }

    /// Norms and rotary embedding of `q` and of `k` (from `kv`, or in a KV-shared layer its
    /// source's of this round), attention over the cache (over the blocks the indexer chooses
    /// from its projections `index`, where the layer has one), times `sigmoid` of the gate
    /// projection `gate` where the layer has one, before `o_proj`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        b: &B,
        s: &ModelSpec,
        q: B::Act,
        kv: Option<(B::Act, B::Act)>,
        gate: Option<B::Act>,
        index: Option<(B::Act, B::Act)>,
        pos: &[u32],
        meta: &AttnMeta,
        cache: &mut Caches<'_, B>,
    ) -> B::Act {
        let mut out = match kv {
            Some((k, v)) => {
                let (q, k, v) = self.project(b, s, q, k, v, pos);
                let out = match (&self.indexer, index) {
                    (Some(ix), Some((iq, ik))) => {
                        let mut picks = ix.run(b, s, iq, ik, pos, meta, &mut cache.kv[ix.pool]);
                        // Sharded, this rank's query heads read its part of the indexer heads.
                        if let Some(part) = &self.index_heads {
                            picks = picks.heads(part.clone());
                        }
                        b.attention_blocks(&q, &k, &v, &mut cache.kv[self.kv], meta, &self.attn, &picks)
                    }
                    _ => match &self.sinks {
                        Some(sinks) => b.attention_sinks(&q, &k, &v, &mut cache.kv[self.kv], meta, &self.attn, sinks),
                        None => b.attention(&q, &k, &v, &mut cache.kv[self.kv], meta, &self.attn),
                    },
                };
                if let Some(i) = self.keep_as {
                    if cache.shared.len() <= i {
                        cache.shared.resize_with(i + 1, || None);
                    }
                    cache.shared[i] = Some((k, v));
                }
                out
            }
            // Another model's K/V, read where `meta` says (the Gemma 4 assistant).
            None if self.source.is_none() => {
                let q = self.project_q(b, s, q, pos);
                b.attention_cached(&q, &cache.kv[self.kv], meta, &self.attn)
            }
            None => {
                let q = self.project_q(b, s, q, pos);
                // The source ran earlier in this round (it precedes every shared layer); its K/V
                // are written again into its pool's same slots, unchanged.
                let Some((k, v)) = self.source.and_then(|i| cache.shared.get(i)).and_then(Option::as_ref) else {
                    unreachable!("a KV-shared layer's source layer runs before it")
                };
                b.attention(&q, k, v, &mut cache.kv[self.kv], meta, &self.attn)
            }
        };
        if let Some(g) = gate {
            b.mul_sigmoid(&mut out, &g);
        }
        out
    }

    /// A KV-shared layer's query: its bias, norm and rotary embedding.
    fn project_q(&self, b: &B, s: &ModelSpec, mut q: B::Act, pos: &[u32]) -> B::Act {
        if let Some([bq, _, _]) = &self.bias {
            b.add_bias(&mut q, bq);
        }
        if let Some(n) = &self.q_norm {
            q = b.rms_norm(&q, n, s.rms_norm_eps, s.norm_one_plus);
        }
        if s.attn_rope {
            let rope = if self.sliding { &s.rope_sliding } else { &s.rope_full };
            b.rope(&mut q, pos, self.attn.head_dim, rope);
        }
        q
    }

    /// Biases, norms and rotary embedding of `q`, `k` and `v`.
    fn project(
        &self,
        b: &B,
        s: &ModelSpec,
        mut q: B::Act,
        mut k: B::Act,
        mut v: B::Act,
        pos: &[u32],
    ) -> (B::Act, B::Act, B::Act) {
        // q (tokens, heads * head_dim), k and v (tokens, kv_heads * head_dim)
        if let Some([bq, bk, bv]) = &self.bias {
            b.add_bias(&mut q, bq);
            b.add_bias(&mut k, bk);
            b.add_bias(&mut v, bv);
        }
        let norms = match (&self.q_norm, &self.k_norm) {
            (Some(q), Some(k)) => Some(QkNorm { q, k, eps: s.rms_norm_eps, one_plus: s.norm_one_plus }),
            _ => None,
        };
        let rope = if self.sliding { &s.rope_sliding } else { &s.rope_full };
        let d = self.attn.head_dim;
        if let Some(ones) = &self.v_norm {
            v = b.rms_norm(&v, ones, s.rms_norm_eps, false);
        }
        if let (Some(n), true) = (&norms, s.qk_norm_full) {
            // Whole-row norms first (over every rank's heads where sharded), then the rope alone.
            match &self.tp {
                Some(tp) => {
                    q = tp.rms_norm_across(b, &q, n.q, n.eps, n.one_plus);
                    k = tp.rms_norm_across(b, &k, n.k, n.eps, n.one_plus);
                }
                None => {
                    q = b.rms_norm(&q, n.q, n.eps, n.one_plus);
                    k = b.rms_norm(&k, n.k, n.eps, n.one_plus);
                }
            }
            if s.attn_rope {
                b.qk_norm_rope(&mut q, &mut k, None, pos, d, rope);
            }
        } else if s.attn_rope {
            b.qk_norm_rope(&mut q, &mut k, norms, pos, d, rope);
        } else if let Some(n) = norms {
            q = b.rms_norm(&q, n.q, n.eps, n.one_plus);
            k = b.rms_norm(&k, n.k, n.eps, n.one_plus);
        }
        (q, k, v)
    }
}
