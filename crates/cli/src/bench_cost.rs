//! What a forward reads and computes, from the model's shape (`tensorfold bench`'s ratios). A
//! mixture-of-experts layer reads the experts its round's rows chose: exactly `top_k` at one
//! row; for more rows that depends on the routing, which the bench does not see, so MoE decode
//! rounds of several rows have no byte count (uniform routing's expected distinct experts gave
//! qwen3-30b-a3b synth ratios of 1.16 and 1.22 at batch 8 and 64 on the H200: its tokens share
//! experts far more than that).

use tf_models::ModelSpec;
use tf_models::spec::LayerKind;

/// A token mixer's weight elements (`None` for attention, which [`Cost::of`] counts) and the f32
/// state elements a sequence keeps for it, from its block file's shapes.
fn mixer_cost(s: &ModelSpec, kind: LayerKind) -> (Option<f64>, usize) {
    let h = s.hidden_size;
    let window = |channels: usize, kernel: usize| channels * kernel.saturating_sub(1);
    match kind {
        LayerKind::Full | LayerKind::Sliding => (None, 0),
        LayerKind::ChannelOnly => (Some(0.0), 0),
        LayerKind::GatedDeltaNet => s.gdn.map_or((Some(0.0), 0), |g| {
            let (ch, hv, vd) = (g.conv_channels(), g.num_v_heads, g.num_v_heads * g.head_v_dim);
            let params = h * (ch + vd + 2 * hv) + vd * h;
            (Some(params as f64), window(ch, g.conv_kernel) + hv * g.head_k_dim * g.head_v_dim)
        }),
        LayerKind::Mamba2 => s.mamba.map_or((Some(0.0), 0), |m| {
            let params = h * (m.inner() + m.conv_dim() + m.num_heads) + m.inner() * h;
            (Some(params as f64), window(m.conv_dim(), m.conv_kernel) + m.num_heads * m.head_dim * m.state_size)
        }),
        LayerKind::Conv => s.conv.map_or((Some(0.0), 0), |c| (Some((4 * h * h) as f64), window(h, c.kernel))),
    }
}

/// A latent attention layer's weight elements (blocks/mla.rs): the query's projections, the
/// latent's, `kv_b_proj` (read as the absorbed per-head weights) and `o_proj`.
fn mla_params(s: &ModelSpec, m: tf_models::spec::MlaSpec) -> f64 {
    let (h, heads) = (s.hidden_size, s.num_heads);
    let q = match m.q_lora_rank {
        Some(r) => h * r + r * heads * m.qk_head_dim(),
        None => h * heads * m.qk_head_dim(),
    };
    let kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
    (q + h * m.latent_dim() + kv_b + heads * m.v_head_dim * h) as f64
}

/// A model's weights and KV traffic.
pub struct Cost {
    /// Matmul weights every token reads (attention, dense MLPs, routers), elements.
    pub layer_params: f64,
    /// lm_head elements.
    pub head_params: f64,
    /// One expert's gate, up and down, elements (0 without experts).
    expert_params: f64,
    /// Layers with experts.
    moe_layers: f64,
    /// Experts a MoE layer has, and a token chooses.
    experts: (f64, f64),
    /// KV cache bytes per token (the attention layers) in the backend's KV type.
    pub kv_bytes_per_token: f64,
    /// Recurrent state bytes a sequence keeps (conv windows and scan states, f32): a decode
    /// step reads and writes them all.
    pub state_bytes_per_seq: f64,
    /// `attention layers * heads * head_dim`, for attention FLOPs.
    pub attn_width: f64,
}

impl Cost {
    /// The cost of spec `s` with KV caches of `kv_dtype`.
    pub fn of(s: &ModelSpec, kv_dtype: tf_core::DType) -> Cost {
        let h = s.hidden_size as f64;
        // An output gate doubles q's projection (Qwen3.5's gated attention).
        let gate = if s.attn_output_gate { 2.0 } else { 1.0 };
        // Layer i's attention weights (its own head shape; no K/V in a KV-shared layer, no V
        // with V from K) and the K/V values it caches per token.
        let attn = |i: usize| -> (f64, usize) {
            if let Some(m) = s.mla {
                return (mla_params(s, m), s.num_kv_heads * s.head_dim);
            }
            let (kvh, d) = s.attn_shape(i);
            let (q, kv) = ((s.num_heads * d) as f64, kvh * d);
            let kv_mats = match (s.kv_source(i), s.full_v_from_k && s.layer_kinds[i] == LayerKind::Full) {
                (Some(_), _) => 0.0,
                (None, true) => 1.0,
                (None, false) => 2.0,
            };
            (h * (gate * q + kv_mats * kv as f64) + q * h, if kv_mats > 0.0 { kv } else { 0 })
        };
        let dense_mlp = |i: usize| if s.mlp_gated { 3.0 } else { 2.0 } * h * s.mlp_width(i) as f64;
        let (mut layer_params, mut moe_layers, mut expert_params, mut experts) = (0.0, 0.0, 0.0, (0.0, 0.0));
        let (mut state_elems, mut kv_elems, mut attn_width) = (0usize, 0usize, 0usize);
        // Per-layer inputs (Gemma 4): the model's projection, and each layer's gate and projection.
        if let Some(p) = s.per_layer_input {
            layer_params += (s.num_layers * p.width) as f64 * h + s.num_layers as f64 * 2.0 * h * p.width as f64;
        }
        for (i, kind) in s.layer_kinds.iter().enumerate() {
            let (mixer, state) = mixer_cost(s, *kind);
            let (attn_params, kv) = attn(i);
            layer_params += mixer.unwrap_or(attn_params);
            if mixer.is_none() {
                kv_elems += kv;
                attn_width += s.num_heads * s.attn_shape(i).1;
            }
            state_elems += state;
            // One-part layers (Nemotron-H) carry a channel mixer only where they have no token mixer.
            if s.one_part_layers && *kind != LayerKind::ChannelOnly {
                continue;
            }
            match &s.moe {
                Some(m) if m.sparse_layers.get(i).copied().unwrap_or(false) => {
                    layer_params += m.num_experts as f64 * h;
                    // Gemma 4's dense MLP beside the experts.
                    if s.dense_beside_experts {
                        layer_params += dense_mlp(i);
                    }
                    // Shared experts: one MLP every token reads (two matrices without a gate).
                    let per = if m.gated { 3.0 } else { 2.0 };
                    layer_params += m.shared.as_ref().map_or(0.0, |sh| per * h * sh.intermediate_size as f64);
                    // A shared expert's sigmoid gate (Qwen3-Next): one row.
                    layer_params += m.shared.as_ref().and_then(|sh| sh.gate).map_or(0.0, |_| h);
                    moe_layers += 1.0;
                    expert_params = if m.gated { 3.0 } else { 2.0 } * h * m.moe_intermediate_size as f64;
                    experts = (m.num_experts as f64, m.top_k as f64);
                }
                _ => layer_params += dense_mlp(i),
            }
        }
        Cost {
            layer_params,
            head_params: (s.vocab_size * s.hidden_size) as f64,
            expert_params,
            moe_layers,
            experts,
            // K and V, or MLA's latent row alone.
            kv_bytes_per_token: (if s.mla.is_some() { 1 } else { 2 } * kv_dtype.kv_bytes(kv_elems)) as f64,
            state_bytes_per_seq: (4 * state_elems) as f64,
            attn_width: attn_width as f64,
        }
    }

    /// A decode round's weight matrices as `(rows, cols)`, fused as the decoder runs them (q, k
    /// and v in one, gate and up in one), the head last: what the cuBLAS-alone reference round
    /// multiplies. `None` for a model with experts or recurrent layers.
    pub fn round_matmuls(s: &ModelSpec) -> Option<Vec<(usize, usize)>> {
        let attention_only = s.layer_kinds.iter().all(|k| matches!(k, LayerKind::Full | LayerKind::Sliding));
        let uniform = s.full_attn_shape.is_none() && s.kv_shared_from.is_none() && s.per_layer_input.is_none();
        if s.moe.is_some() || !attention_only || s.attn_output_gate || s.attn_head_gate || s.mla.is_some() || !uniform {
            return None;
        }
        let (h, q, kv) = (s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim);
        let up = if s.mlp_gated { 2 } else { 1 } * s.intermediate_size;
        let layer = [(q + 2 * kv, h), (h, q), (up, h), (h, s.intermediate_size)];
        let mut m: Vec<(usize, usize)> = (0..s.num_layers).flat_map(|_| layer).collect();
        m.push((s.vocab_size, h));
        Some(m)
    }

    /// Weight elements a decode round of `batch` rows reads; `None` for a MoE model's rounds of
    /// several rows (see the module doc).
    pub fn round_params(&self, batch: usize) -> Option<f64> {
        let dense = self.layer_params + self.head_params;
        match (self.moe_layers > 0.0, batch) {
            (false, _) => Some(dense),
            (true, 1) => Some(dense + self.moe_layers * self.experts.1 * self.expert_params),
            (true, _) => None,
        }
    }

    /// Weight bytes a decode round of `batch` rows reads, bf16 but for the FP8 weights `fp8`
    /// (bench_fp8.rs; one row of a MoE model reads `top_k` of its experts); `None` as
    /// [`Cost::round_params`].
    pub fn round_bytes(&self, batch: usize, fp8: crate::bench_fp8::Fp8Bytes) -> Option<f64> {
        let experts = if self.moe_layers > 0.0 { fp8.experts * self.experts.1 / self.experts.0 } else { 0.0 };
        self.round_params(batch).map(|p| 2.0 * p - fp8.dense - experts)
    }

    /// Layer weight elements one token multiplies by (half a token's layer FLOPs).
    pub fn token_params(&self) -> f64 {
        self.layer_params + self.moe_layers * self.experts.1 * self.expert_params
    }

    /// Every matmul weight of the model, elements.
    pub fn all_params(&self) -> f64 {
        self.layer_params + self.head_params + self.moe_layers * self.experts.0 * self.expert_params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use tf_models::config::RawConfig;
    use tf_models::registry::spec_for;

    fn spec(like: &str) -> ModelSpec {
        let config = crate::synth::preset(like).expect("a preset");
        spec_for(&RawConfig::parse(Path::new("config.json"), &config.to_string()).expect("config")).expect("spec")
    }

    /// Matmul weight elements of the synthesized checkpoint (every 2-D tensor but the embedding).
    fn synth_params(s: &ModelSpec) -> f64 {
        let t = crate::synth::tensor_list(s);
        let mats = t.iter().filter(|(n, shape)| shape.len() == 2 && n != "model.embed_tokens.weight");
        mats.map(|(_, shape)| shape.iter().product::<usize>() as f64).sum()
    }

    #[test]
    fn dense_rounds_read_every_weight_whatever_the_batch() {
        let s = spec("qwen3-8b");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        assert_eq!((c.round_params(1), c.round_params(64)), (Some(c.all_params()), Some(c.all_params())));
        assert_eq!(c.token_params(), c.layer_params);
    }

    #[test]
    fn moe_rounds_read_the_chosen_experts() {
        let s = spec("qwen3-30b-a3b");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        // One row: its 8 experts of 128 in each of 48 layers.
        let expert = 3.0 * 2048.0 * 768.0;
        assert_eq!(c.round_params(1), Some(c.layer_params + c.head_params + 48.0 * 8.0 * expert));
        assert_eq!(c.token_params(), c.layer_params + 48.0 * 8.0 * expert);
        // More rows read what the routing chose: no count.
        assert_eq!((c.round_params(2), c.round_params(64)), (None, None));
        // MiniMax-M2: experts in all 62 layers, 8 of 256 of 3 x 3072 x 1536 a token.
        let s = spec("minimax-m2");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        assert_eq!(c.token_params(), c.layer_params + 62.0 * 8.0 * 3.0 * 3072.0 * 1536.0);
    }

    #[test]
    fn fp8_weights_read_their_codes_and_a_row_its_experts_share() {
        use crate::bench_fp8::Fp8Bytes;
        let c = Cost::of(&spec("qwen3-8b"), tf_core::DType::BF16);
        let fp8 = Fp8Bytes { dense: 1000.0, experts: 0.0 };
        assert_eq!(c.round_bytes(64, fp8), Some(2.0 * c.all_params() - 1000.0));
        // qwen3-30b-a3b: a row reads 8 of each layer's 128 experts.
        let c = Cost::of(&spec("qwen3-30b-a3b"), tf_core::DType::BF16);
        let fp8 = Fp8Bytes { dense: 1000.0, experts: 128.0 * 50.0 };
        assert_eq!(c.round_bytes(1, fp8), c.round_params(1).map(|p| 2.0 * p - 1000.0 - 8.0 * 50.0));
        assert_eq!(c.round_bytes(2, fp8), None);
    }

    #[test]
    fn the_reference_round_multiplies_every_dense_weight_once() {
        let s = spec("qwen3-8b");
        let m = Cost::round_matmuls(&s).expect("dense");
        assert_eq!(m.len(), 36 * 4 + 1);
        assert_eq!(
            m.iter().map(|&(r, c)| (r * c) as f64).sum::<f64>(),
            Cost::of(&s, tf_core::DType::BF16).all_params()
        );
        assert_eq!((m[0], m[2], m[144]), ((6144, 4096), (24576, 4096), (151936, 4096)));
        for moe_or_hybrid in ["qwen3-30b-a3b", "qwen3.5-27b"] {
            assert_eq!(Cost::round_matmuls(&spec(moe_or_hybrid)), None, "{moe_or_hybrid}");
        }
    }

    #[test]
    fn hybrid_layers_count_their_own_weights_and_state() {
        let s = spec("qwen3.5-27b");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        // 16 of 64 layers attend: KV and attention width are theirs alone.
        assert_eq!(c.kv_bytes_per_token, (2 * 16 * 4 * 256 * 2) as f64);
        assert_eq!(c.attn_width, (16 * 24 * 256) as f64);
        // 48 Gated DeltaNet layers: a 3-wide window over q, k, v (2 * 16 * 128 + 48 * 128
        // channels) and a 128 x 128 state per value head, in f32.
        let per_layer = 3 * (2 * 16 * 128 + 48 * 128) + 48 * 128 * 128;
        assert_eq!(c.state_bytes_per_seq, (4 * 48 * per_layer) as f64);
        let s = spec("qwen3-next-80b-a3b");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        assert_eq!(c.token_params(), c.layer_params + 48.0 * 10.0 * 3.0 * 2048.0 * 512.0);
    }

    #[test]
    fn latent_attention_counts_its_own_projections_and_one_cached_row() {
        let s = spec("deepseek-v3");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        // 61 layers of one latent row of 512 + 64, bf16.
        assert_eq!(c.kv_bytes_per_token, (61 * 576 * 2) as f64);
    }

    #[test]
    fn shared_experts_and_the_dense_layer_count_for_every_token() {
        let s = spec("glm4.5-air");
        let c = Cost::of(&s, tf_core::DType::BF16);
        assert_eq!(c.all_params(), synth_params(&s));
        // 45 MoE layers (layer 0 is dense), 8 of 128 experts a token; the shared expert is read
        // by every token, so it is in layer_params.
        let expert = 3.0 * 4096.0 * 1408.0;
        assert_eq!(c.token_params(), c.layer_params + 45.0 * 8.0 * expert);
        let attn = 4096.0 * (96.0 * 128.0 + 2.0 * 8.0 * 128.0) + 96.0 * 128.0 * 4096.0;
        let dense = 3.0 * 4096.0 * 10944.0;
        assert_eq!(c.layer_params, 46.0 * attn + dense + 45.0 * (128.0 * 4096.0 + expert));
    }
}
