//! The shared decoder-only transformer every family runs (config, attention, MLP or experts,
//! block, model), over `Backend` ops only. Shapes in comments are `(rows, cols)`.

use crate::error::ModelError;
use crate::spec::{LayerKind, ModelSpec};
use crate::weights::{GateUp, Loader};
use tf_backend::{AttnMeta, AttnParams, Backend, Experts, KvShape, MoeParams, QkNorm, Round};

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

enum Ffn<B: Backend> {
    Dense { gate_up: GateUp<B::Mat>, down: B::Mat },
    Moe { router: B::Mat, experts: Experts<B::Mat>, params: MoeParams },
}

struct Layer<B: Backend> {
    input_norm: B::Vec,
    post_attn_norm: B::Vec,
    pre_ffn_norm: Option<B::Vec>,
    post_ffn_norm: Option<B::Vec>,
    q: B::Mat,
    k: B::Mat,
    v: B::Mat,
    o: B::Mat,
    q_norm: Option<B::Vec>,
    k_norm: Option<B::Vec>,
    ffn: Ffn<B>,
    attn: AttnParams,
    sliding: bool,
}

/// A loaded decoder on backend `B`.
pub struct Decoder<B: Backend> {
    /// What was loaded.
    pub spec: ModelSpec,
    embed: B::Mat,
    lm_head: Option<B::Mat>,
    norm: B::Vec,
    layers: Vec<Layer<B>>,
    /// The backend's identity for these weights (`Round::model`).
    id: u64,
    /// Whether a forward reads the host only through its `Round` (`Round::replayable`): no
    /// sliding windows (experts route on the backend; a backend whose expert path must read the
    /// host for a round spoils that round's recording and runs it op by op).
    replayable: bool,
}

impl<B: Backend> Decoder<B> {
    /// Loads and validates every tensor the spec needs.
    pub fn load(spec: ModelSpec, ld: &Loader<'_, B>) -> Result<Decoder<B>, ModelError> {
        let (vocab, hidden) = (spec.vocab_size, spec.hidden_size);
        let embed = ld.mat("model.embed_tokens.weight", vocab, hidden)?;
        let lm_head = match spec.tie_word_embeddings {
            true => None,
            false => Some(ld.mat("lm_head.weight", vocab, hidden)?),
        };
        let norm = ld.vec("model.norm.weight", hidden)?;
        let layers: Vec<Layer<B>> = (0..spec.num_layers).map(|i| load_layer(&spec, ld, i)).collect::<Result<_, _>>()?;
        ld.refuse_unused(spec.tie_word_embeddings)?;
        let replayable = layers.iter().all(|l| !l.sliding);
        Ok(Decoder { spec, embed, lm_head, norm, layers, id: ld.fresh_id(), replayable })
    }

    /// One KV pool per layer, `num_blocks` blocks of `block_size` tokens each.
    pub fn alloc_kv(&self, b: &B, num_blocks: usize, block_size: usize) -> Result<Vec<B::Kv>, ModelError> {
        let shape =
            KvShape { num_blocks, block_size, num_kv_heads: self.spec.num_kv_heads, head_dim: self.spec.head_dim };
        (0..self.layers.len()).map(|_| Ok(b.kv(shape)?)).collect()
    }

    /// Bytes of KV cache per token in pools of `kv_dtype` (the backend's `kv_dtype()`).
    pub fn kv_bytes_per_token(&self, kv_dtype: tf_core::DType) -> usize {
        2 * self.layers.len() * self.spec.num_kv_heads * self.spec.head_dim * kv_dtype.size()
    }

    /// Runs one round; returns logits `(logits_rows, vocab)`.
    pub fn forward(&self, b: &B, batch: &Batch<'_, B::Held>, kv: &mut [B::Kv]) -> B::Act {
        self.forward_layers(b, batch, kv, self.layers.len())
    }

    /// Runs only the first `num_layers` layers, then the final norm and head (early-exit
    /// drafting); their K/V land in the same pools as a full forward would put them.
    pub fn forward_layers(&self, b: &B, batch: &Batch<'_, B::Held>, kv: &mut [B::Kv], num_layers: usize) -> B::Act {
        let positions = batch.meta.positions();
        let s = &self.spec;
        let round = Round {
            replayable: self.replayable,
            model: [self.id, num_layers as u64],
            ids: batch.ids,
            held: batch.held,
            positions: &positions,
            meta: batch.meta,
            group: s.num_heads / s.num_kv_heads.max(1),
        };
        let h = b.forward_round(&round, kv, &mut |r, kv| self.run_layers(b, r, kv, num_layers));
        self.head(b, &h, batch.logits_rows)
    }

    /// The embedding and the first `num_layers` layers over round `r`: the residual stream after them.
    fn run_layers(&self, b: &B, r: &Round<'_, B::Held>, kv: &mut [B::Kv], num_layers: usize) -> B::Act {
        let s = &self.spec;
        let mut h = match r.held {
            Some(held) => b.embed_held(&self.embed, held, r.ids, s.embed_scale),
            None => b.embed(&self.embed, r.ids, s.embed_scale),
        }; // (tokens, hidden)
        // A block's MLP output goes into h in its down projection's store, or (sandwich norms,
        // experts) through the next block's fused add + input norm.
        let mut pending: Option<B::Act> = None;
        for (layer, kv) in self.layers.iter().zip(kv.iter_mut()).take(num_layers) {
            pending = self.block(b, layer, &mut h, pending.take(), r.positions, r.meta, kv);
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
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let mut logits = b
            .norm_matmul_many(h, &self.norm, s.rms_norm_eps, s.norm_one_plus, &[head])
            .pop()
            .unwrap_or_else(|| unreachable!("one weight, one output")); // (rows, vocab)
        if let Some(cap) = s.final_softcap {
            b.softcap(&mut logits, cap);
        }
        logits
    }

    /// One block over the residual stream `h`, into which the previous block's output `prev`
    /// (when it was not added yet) is added first; returns this block's MLP output where it is
    /// not added into `h` here.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        b: &B,
        l: &Layer<B>,
        h: &mut B::Act,
        prev: Option<B::Act>,
        pos: &[u32],
        meta: &AttnMeta,
        kv: &mut B::Kv,
    ) -> Option<B::Act> {
        let (eps, one_plus) = (self.spec.rms_norm_eps, self.spec.norm_one_plus);
        let qkv = [&l.q, &l.k, &l.v];
        let [q, k, v]: [B::Act; 3] = match prev {
            Some(f) => b.matmul_many(&b.add_rms_norm(h, &f, &l.input_norm, eps, one_plus), &qkv),
            None => b.norm_matmul_many(h, &l.input_norm, eps, one_plus, &qkv),
        }
        .try_into()
        .unwrap_or_else(|_| unreachable!("three outputs"));
        let out = self.attention(b, l, q, k, v, pos, meta, kv);
        // The FFN's input: norms of h after the attention output is added.
        let ffn_in = match &l.pre_ffn_norm {
            Some(pre) => {
                let a = b.rms_norm(&b.matmul(&out, &l.o), &l.post_attn_norm, eps, one_plus);
                FfnIn::Normed(b.add_rms_norm(h, &a, pre, eps, one_plus))
            }
            None => {
                b.matmul_add(&out, &l.o, h);
                FfnIn::Residual(&l.post_attn_norm)
            }
        };
        self.ffn(b, l, h, ffn_in)
    }

    /// Norms and rotary embedding of `q` and `k`, attention over the cache, before `o_proj`.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        b: &B,
        l: &Layer<B>,
        mut q: B::Act,
        mut k: B::Act,
        v: B::Act,
        pos: &[u32],
        meta: &AttnMeta,
        kv: &mut B::Kv,
    ) -> B::Act {
        let s = &self.spec;
        // q (tokens, heads * head_dim), k and v (tokens, kv_heads * head_dim)
        let norms = match (&l.q_norm, &l.k_norm) {
            (Some(q), Some(k)) => Some(QkNorm { q, k, eps: s.rms_norm_eps, one_plus: s.norm_one_plus }),
            _ => None,
        };
        let rope = if l.sliding { &s.rope_sliding } else { &s.rope_full };
        b.qk_norm_rope(&mut q, &mut k, norms, pos, s.head_dim, rope);
        b.attention(&q, &k, &v, kv, meta, &l.attn)
    }

    /// The MLP or experts on `input`; the dense MLP without a post norm adds its output into `h`
    /// in the down projection's store, the others return it.
    fn ffn(&self, b: &B, l: &Layer<B>, h: &mut B::Act, input: FfnIn<'_, B>) -> Option<B::Act> {
        let (eps, one_plus) = (self.spec.rms_norm_eps, self.spec.norm_one_plus);
        let normed = |ws: &[&B::Mat]| match &input {
            FfnIn::Normed(x) => b.matmul_many(x, ws),
            FfnIn::Residual(nw) => b.norm_matmul_many(h, nw, eps, one_plus, ws),
        };
        match &l.ffn {
            Ffn::Dense { gate_up, down } => {
                let act = self.spec.act;
                let a = match (gate_up, &input) {
                    (GateUp::Apart(gate, up), _) => {
                        let [g, u]: [B::Act; 2] =
                            normed(&[gate, up]).try_into().unwrap_or_else(|_| unreachable!("two outputs"));
                        b.glu(&g, &u, act)
                    }
                    (GateUp::Packed(gu), FfnIn::Normed(x)) => b.matmul_glu(x, gu, act),
                    (GateUp::Packed(gu), FfnIn::Residual(nw)) => b.norm_matmul_glu(h, nw, eps, one_plus, gu, act),
                };
                match &l.post_ffn_norm {
                    Some(post) => Some(b.rms_norm(&b.matmul(&a, down), post, eps, one_plus)),
                    None => {
                        b.matmul_add(&a, down, h);
                        None
                    }
                }
            }
            Ffn::Moe { router, experts, params } => {
                let x = match input {
                    FfnIn::Normed(x) => x,
                    FfnIn::Residual(nw) => b.rms_norm(h, nw, eps, one_plus),
                };
                Some(b.moe(&x, &b.matmul(&x, router), experts, params))
            }
        }
    }
}

/// What the FFN runs on: rows already normed, or the residual stream and the norm to apply.
enum FfnIn<'a, B: Backend> {
    Normed(B::Act),
    Residual(&'a B::Vec),
}

fn load_layer<B: Backend>(s: &ModelSpec, ld: &Loader<'_, B>, i: usize) -> Result<Layer<B>, ModelError> {
    let p = format!("model.layers.{i}.");
    let (hidden, d) = (s.hidden_size, s.head_dim);
    let norm = |name: &str| ld.vec(&format!("{p}{name}.weight"), hidden);
    let head_norm =
        |name: &str| if s.qk_norm { ld.vec(&format!("{p}self_attn.{name}.weight"), d).map(Some) } else { Ok(None) };
    let proj = |name: &str, rows, cols| ld.mat(&format!("{p}{name}.weight"), rows, cols);
    let sliding = s.layer_kinds[i] == LayerKind::Sliding;
    let sparse = s.moe.as_ref().is_some_and(|m| m.sparse_layers[i]);
    let ffn = match (&s.moe, sparse) {
        (Some(m), true) => Ffn::Moe {
            router: proj("mlp.gate", m.num_experts, hidden)?,
            experts: load_experts(ld, &p, m.num_experts, m.moe_intermediate_size, hidden)?,
            params: MoeParams { top_k: m.top_k, norm_topk_prob: m.norm_topk_prob, act: s.act },
        },
        _ => Ffn::Dense {
            gate_up: ld.gate_up(
                &format!("{p}mlp.gate_proj.weight"),
                &format!("{p}mlp.up_proj.weight"),
                s.intermediate_size,
                hidden,
            )?,
            down: proj("mlp.down_proj", hidden, s.intermediate_size)?,
        },
    };
    Ok(Layer {
        input_norm: norm("input_layernorm")?,
        post_attn_norm: norm("post_attention_layernorm")?,
        pre_ffn_norm: if s.sandwich_norms { Some(norm("pre_feedforward_layernorm")?) } else { None },
        post_ffn_norm: if s.sandwich_norms { Some(norm("post_feedforward_layernorm")?) } else { None },
        q: proj("self_attn.q_proj", s.num_heads * d, hidden)?,
        k: proj("self_attn.k_proj", s.num_kv_heads * d, hidden)?,
        v: proj("self_attn.v_proj", s.num_kv_heads * d, hidden)?,
        o: proj("self_attn.o_proj", hidden, s.num_heads * d)?,
        q_norm: head_norm("q_norm")?,
        k_norm: head_norm("k_norm")?,
        ffn,
        attn: AttnParams {
            num_heads: s.num_heads,
            num_kv_heads: s.num_kv_heads,
            head_dim: d,
            scale: s.attn_scale,
            window: if sliding { s.sliding_window } else { None },
            softcap: s.attn_softcap,
        },
        sliding,
    })
}

fn load_experts<B: Backend>(
    ld: &Loader<'_, B>,
    p: &str,
    n: usize,
    inter: usize,
    hidden: usize,
) -> Result<Experts<B::Mat>, ModelError> {
    let mut ex = Experts { gate: Vec::new(), up: Vec::new(), down: Vec::new() };
    for e in 0..n {
        let name = |w: &str| format!("{p}mlp.experts.{e}.{w}.weight");
        ex.gate.push(ld.mat(&name("gate_proj"), inter, hidden)?);
        ex.up.push(ld.mat(&name("up_proj"), inter, hidden)?);
        ex.down.push(ld.mat(&name("down_proj"), hidden, inter)?);
    }
    Ok(ex)
}
