//! The normalised description of a decoder-only model that the shared decoder runs: sizes,
//! per-layer attention kind and rope, norm style, MLP or experts. Family files build one.

use crate::config::RawConfig;
use crate::error::ModelError;
use crate::names::Names;
use tf_backend::rope::RopeScaling;
use tf_backend::{Activation, MoeParams, MoeScoring, Rope};

/// Attention kind of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Attends to every earlier position.
    Full,
    /// Attends to the last `sliding_window` positions.
    Sliding,
    /// LFM2's double-gated short convolution (`blocks/short_conv.rs`), a conv window in a state slot.
    Conv,
    /// Qwen3-Next / Qwen3.5's Gated DeltaNet (`blocks/gdn.rs`): a conv window and a delta-rule
    /// state in a state slot.
    GatedDeltaNet,
    /// Mamba2's selective state-space scan (`blocks/mamba2.rs`, Nemotron-H): a conv window and
    /// an `[H, P, N]` scan state in a state slot.
    Mamba2,
    /// No token mixer: the layer is only its channel mixer (Nemotron-H's MLP and MoE layers,
    /// with `one_part_layers`).
    ChannelOnly,
}

/// Mixture-of-experts settings: the router variant (tf_backend router.rs), the experts' tensor
/// names and the optional shared experts and latent projections. [`MoeSpec::softmax`] is
/// Qwen3-MoE's; families change the fields that differ.
#[derive(Clone, Debug)]
pub struct MoeSpec {
    /// Experts per MoE layer.
    pub num_experts: usize,
    /// Experts chosen per token.
    pub top_k: usize,
    /// Width of each expert's MLP.
    pub moe_intermediate_size: usize,
    /// Renormalise the chosen weights.
    pub norm_topk_prob: bool,
    /// Whether layer i uses experts (else the dense MLP).
    pub sparse_layers: Vec<bool>,
    /// Router scores: softmax or sigmoid.
    pub scoring: MoeScoring,
    /// Expert groups (`n_group`; 1: none).
    pub n_group: usize,
    /// Groups a token may choose from (`topk_group`).
    pub topk_group: usize,
    /// Added to the chosen weights' sum before renormalising (DeepSeek / GLM 1e-20, LFM2 1e-6).
    pub norm_eps: f32,
    /// `routed_scaling_factor` (1: none).
    pub routed_scaling_factor: f32,
    /// The MoE module in a layer (`mlp`, LFM2 `feed_forward`, Nemotron-H `mixer`).
    pub module: &'static str,
    /// The router weight `[experts, hidden]` inside the module (`gate`).
    pub router: &'static str,
    /// The choice bias `[experts]` inside the module, where the router has one
    /// (`gate.e_score_correction_bias`, LFM2 `expert_bias`).
    pub choice_bias: Option<&'static str>,
    /// An expert's gate, up and down projections inside `experts.{e}` (`gate_proj`, ...).
    pub expert_names: [&'static str; 3],
    /// Experts (and the shared expert) have a gate; else `down(act(up(x)))` (Nemotron-H).
    pub gated: bool,
    /// Shared experts added to the routed output.
    pub shared: Option<SharedExperts>,
    /// Nemotron-H's `moe_latent_size`: routed experts run on `fc1_latent_proj(x)` and their sum
    /// goes through `fc2_latent_proj` (the router and shared experts read `x`).
    pub latent_size: Option<usize>,
    /// The experts are stored stacked, one 3-D tensor per projection (`{module}.gate_proj.weight`
    /// `[experts, inter, hidden]`, Step's `moe.*`), not as `experts.{e}.*`.
    pub stacked: bool,
    /// gpt-oss's experts: `experts.gate_up_proj` `[experts, hidden, 2 inter]` (gate and up
    /// interleaved by column, the input dimension first) and `experts.down_proj` `[experts,
    /// inter, hidden]`, each with its `_bias`; the router a linear with a bias.
    pub gpt_oss: bool,
}

/// Shared experts: one MLP of `intermediate_size` over every token, added to the routed output.
#[derive(Clone, Debug)]
pub struct SharedExperts {
    /// The MLP inside the MoE module (GLM / DeepSeek `shared_experts`, Qwen3-Next `shared_expert`).
    pub module: &'static str,
    /// Its width (`n_shared_experts * moe_intermediate_size`, `shared_expert_intermediate_size`).
    pub intermediate_size: usize,
    /// A `[1, hidden]` weight inside the MoE module whose sigmoid scales the output per token
    /// (Qwen3-Next `shared_expert_gate`).
    pub gate: Option<&'static str>,
    /// Its gate, up and down projections' names where they differ from the routed experts'
    /// (MiniMax M3: `w1/w3/w2` experts, `gate_proj/up_proj/down_proj` shared experts).
    pub names: Option<[&'static str; 3]>,
    /// The MLP sits in the layer beside the MoE module (Step's `share_expert`), not inside it.
    pub beside: bool,
}

impl MoeSpec {
    /// Qwen3-MoE's experts: softmax top-k, `mlp.gate`, `mlp.experts.{e}.{gate,up,down}_proj`.
    pub fn softmax(
        num_experts: usize,
        top_k: usize,
        moe_intermediate_size: usize,
        norm_topk_prob: bool,
        sparse_layers: Vec<bool>,
    ) -> MoeSpec {
        MoeSpec {
            num_experts,
            top_k,
            moe_intermediate_size,
            norm_topk_prob,
            sparse_layers,
            scoring: MoeScoring::Softmax,
            n_group: 1,
            topk_group: 1,
            norm_eps: 0.0,
            routed_scaling_factor: 1.0,
            module: "mlp",
            router: "gate",
            choice_bias: None,
            expert_names: ["gate_proj", "up_proj", "down_proj"],
            gated: true,
            shared: None,
            latent_size: None,
            stacked: false,
            gpt_oss: false,
        }
    }

    /// The backend's routing parameters with the experts' activation `act`.
    pub fn params(&self, act: Activation) -> MoeParams {
        MoeParams {
            top_k: self.top_k,
            scoring: self.scoring,
            n_group: self.n_group,
            topk_group: self.topk_group,
            norm_topk_prob: self.norm_topk_prob,
            norm_eps: self.norm_eps,
            scale: self.routed_scaling_factor,
            act,
            clamp: None,
        }
    }
}

/// Everything the shared decoder needs to load and run a family.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// HF architecture name, e.g. `Qwen3ForCausalLM`.
    pub architecture: String,
    /// Embedding rows (the vocabulary as loaded).
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// Dense MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Query heads of each layer where they differ between layers (Step's sliding layers,
    /// `num_sliding_attention_heads` / `per_layer_config`); empty: `num_heads` everywhere.
    pub layer_heads: Vec<usize>,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// `lm_head` shares the embedding table.
    pub tie_word_embeddings: bool,
    /// Kind of each layer.
    pub layer_kinds: Vec<LayerKind>,
    /// Window of sliding layers.
    pub sliding_window: Option<usize>,
    /// Rope of full layers.
    pub rope_full: Rope,
    /// Rope of sliding layers.
    pub rope_sliding: Rope,
    /// LongRoPE's long table, which an engine of a longer context than the original one puts
    /// in place of both ropes (`Model::fit_context`); `None` for every other rope.
    pub long_rope: Option<crate::longrope::LongRope>,
    /// MLP activation.
    pub act: Activation,
    /// Attention score scale.
    pub attn_scale: f32,
    /// Factor on embeddings (Gemma: sqrt(hidden)).
    pub embed_scale: f32,
    /// Soft-capping of final logits.
    pub final_softcap: Option<f32>,
    /// Soft-capping of attention scores.
    pub attn_softcap: Option<f32>,
    /// RMSNorm on each query and key head.
    pub qk_norm: bool,
    /// The QK norm is over each token's whole q and k projections, every head together
    /// (MiniMax-M2), not per head.
    pub qk_norm_full: bool,
    /// Norms after attention and after the MLP as well as before (Gemma).
    pub sandwich_norms: bool,
    /// Norms scale by `1 + w` (Gemma).
    pub norm_one_plus: bool,
    /// Experts, for MoE families.
    pub moe: Option<MoeSpec>,
    /// BOS ids named by the config.
    pub bos_token_id: Vec<i64>,
    /// EOS ids named by the config.
    pub eos_token_id: Vec<i64>,
    /// PAD ids named by the config.
    pub pad_token_id: Vec<i64>,
    /// The checkpoint's tensor names for the shared blocks' parts.
    pub names: Names,
    /// Short conv layers' settings, for families that have them.
    pub conv: Option<ConvSpec>,
    /// Gated DeltaNet layers' shape, for families that have them.
    pub gdn: Option<GdnSpec>,
    /// Attention's output times `sigmoid` of a gate projection as wide as the queries, which the
    /// checkpoint's `q_proj` interleaves per head (Qwen3-Next, Qwen3.5).
    pub attn_output_gate: bool,
    /// Attention's output times `sigmoid` of a per-head gate `g_proj` `[heads, hidden]` of the
    /// layer's input, each head's value over its whole width (LFM3's `use_attention_gate`).
    pub attn_head_gate: bool,
    /// q, k and v projections carry biases (`attention_bias`; GLM-4.5), added before QK norm.
    pub attention_bias: bool,
    /// The attention's output projection carries a bias too (gpt-oss's `o_proj.bias`).
    pub attn_out_bias: bool,
    /// Each attention layer has per-head sink logits (`self_attn.sinks`, gpt-oss).
    pub attn_sinks: bool,
    /// Name prefixes of checkpoint tensors this model knowingly leaves unread (GLM-4.5's MTP
    /// layers `model.layers.{num_hidden_layers + j}.`); the unused-tensor check lets them pass.
    pub unread_prefixes: Vec<String>,
    /// Weights every layer stores fused, loaded as their parts (Phi-3's `qkv_proj`, fused.rs).
    pub fused: Vec<crate::fused::FusedRows>,
    /// Mamba2 layers' settings, for families that have them.
    pub mamba: Option<MambaSpec>,
    /// Attention applies the rotary embedding (Nemotron-H's attention has none).
    pub attn_rope: bool,
    /// Each layer is one part behind one norm (`names.input_norm`) and a residual add: a token
    /// mixer without a channel mixer, or a channel mixer alone (`LayerKind::ChannelOnly`)
    /// (Nemotron-H); else each layer is a token mixer then a channel mixer.
    pub one_part_layers: bool,
    /// The dense MLP is gated (`down(act(gate(x)) * up(x))`); else `down(act(up(x)))`.
    pub mlp_gated: bool,
    /// Multi-head latent attention's ranks and head widths (DeepSeek V3): its layers cache one
    /// latent row per token (`num_kv_heads` 1 of `head_dim` `kv_lora_rank + qk_rope_head_dim`).
    pub mla: Option<MlaSpec>,
    /// Full layers' own KV heads and head width (Gemma 4's `num_global_key_value_heads` and
    /// `global_head_dim`); sliding layers keep `num_kv_heads` and `head_dim`.
    pub full_attn_shape: Option<(usize, usize)>,
    /// Full layers take V from their K projection (Gemma 4's `attention_k_eq_v`: no `v_proj`).
    pub full_v_from_k: bool,
    /// An RMSNorm without a scale on each V head (Gemma 4).
    pub v_norm: bool,
    /// Per-layer input embeddings gated into each layer (Gemma 4, `blocks/per_layer.rs`).
    pub per_layer_input: Option<PerLayerInputSpec>,
    /// Each layer's output is multiplied by its `layer_scalar` (Gemma 4).
    pub layer_scalar: bool,
    /// The first KV-shared layer (Gemma 4's `num_hidden_layers - num_kv_shared_layers`): it and
    /// every later layer attend over the K/V of the last earlier layer of their kind
    /// ([`ModelSpec::kv_source`]), with no K/V projections and no pool of their own.
    pub kv_shared_from: Option<usize>,
    /// Every attention layer reads K/V another model wrote, from the pool it is handed, with
    /// no K/V projections and writing none (the Gemma 4 assistant, `crate::assistant`).
    pub kv_read_only: bool,
    /// Layers from this one on have MLPs twice `intermediate_size` wide (Gemma 4's
    /// `use_double_wide_mlp` on its KV-shared layers).
    pub wide_mlp_from: Option<usize>,
    /// Sparse layers run the dense MLP beside their experts (Gemma 4's `enable_moe_block`,
    /// `blocks/dense_moe.rs`).
    pub dense_beside_experts: bool,
    /// The multi-token-prediction layers the checkpoint holds after the decoder's (`mtp.rs`).
    pub mtp: Option<MtpSpec>,
    /// The lightning indexer of block-sparse attention layers (MiniMax M3, `blocks/indexer.rs`).
    pub index: Option<IndexSpec>,
    /// Per layer, the clamp of the dense MLP's and the shared experts' gated activation
    /// (`Backend::glu_clamped`; Step's `swiglu_limits_shared`); empty or `None`: no clamp.
    pub mlp_clamp: Vec<Option<f32>>,
    /// Per layer, the clamp of the routed experts' gated activation (Step's `swiglu_limits`).
    pub expert_clamp: Vec<Option<f32>>,
}

/// A checkpoint's multi-token-prediction layers (DeepSeek V3's and GLM-4.x's
/// `num_nextn_predict_layers`, Qwen3.5's and Qwen3-Next's `mtp_num_hidden_layers`), loaded
/// only for drafting (`crate::mtp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtpSpec {
    /// How many depths the checkpoint holds.
    pub num_layers: usize,
    /// Whether their channel mixer is the routed experts (else the dense MLP).
    pub sparse: bool,
    /// How the checkpoint names and arranges them.
    pub layout: MtpLayout,
    /// The head has its own embedding table (`mtp_use_dedicated_embeddings`); where false a
    /// NextN layer may still carry one.
    pub own_embed: bool,
    /// The first depth's attention kind (Step's may be a sliding layer; the others' are full).
    pub kind: LayerKind,
    /// Why these layers do not draft, where the family knows they cannot yet (they stay unread).
    pub unsupported: Option<&'static str>,
}

/// How a checkpoint names its MTP layer and where the next drafting step reads its hidden row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtpLayout {
    /// DeepSeek V3 / GLM-4.x: `model.layers.{num_hidden_layers}.` holds `enorm`, `hnorm`,
    /// `eh_proj`, `shared_head.norm` (and optionally `embed_tokens`, `shared_head.head`) beside
    /// the layer's own tensors; the next step reads the layer's output before `shared_head.norm`.
    NextN,
    /// Qwen3.5 / Qwen3-Next: `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.fc`,
    /// `mtp.norm` and the layer under `mtp.layers.0.`; the target's head reads the normed
    /// output, and so does the next step.
    Qwen,
    /// Step 3.5 / 3.7: NextN's names at `model.layers.{num_hidden_layers + j}.`, but the head
    /// and the next step both read the output after `shared_head.norm`; depth `j`'s clamps are
    /// those the config lists for decoder layer `j` (as transformers' MtpModel builds it), its
    /// query head count the full layers'. Of several depths the first drafts (as vLLM's
    /// proposer runs it); the others stay unread.
    Step,
}

/// Indexed block-sparse attention (MiniMax M3): an indexer per sparse layer scores blocks of
/// keys, and each query attends only to its chosen blocks (tf_backend `sparse.rs`). Its keys
/// live in indexer-key pools after the attention pools, of the attention pools' shape, each
/// holding the keys of several layers side by side ([`ModelSpec::index_slot`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSpec {
    /// Indexer heads (`index_n_heads`), dividing the query heads.
    pub num_heads: usize,
    /// Width of an indexer head and of its one key head (`index_head_dim`).
    pub head_dim: usize,
    /// Keys per scored block (`index_block_size`).
    pub block_size: usize,
    /// Blocks each query keeps, the local ones included (`index_topk_blocks`).
    pub topk: usize,
    /// The most recent blocks each query always keeps (`index_local_blocks`).
    pub local: usize,
    /// Whether layer i's attention is block-sparse (`layer_types` `minimax_m3_sparse`).
    pub layers: Vec<bool>,
}

/// Per-layer input embeddings (Gemma 4's `hidden_size_per_layer_input`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerLayerInputSpec {
    /// Width of each layer's input (`hidden_size_per_layer_input`).
    pub width: usize,
    /// Rows of the per-layer embedding table (`vocab_size_per_layer_input`).
    pub vocab: usize,
}

impl ModelSpec {
    /// KV pools the attention layers own (before any indexer-key pool).
    pub fn attn_pools(&self) -> usize {
        (0..self.num_layers)
            .filter(|&i| {
                matches!(self.layer_kinds[i], LayerKind::Full | LayerKind::Sliding) && self.kv_source(i).is_none()
            })
            .count()
    }

    /// Indexer keys of one layer per half (K or V) of an indexer-key pool's slot, which is as
    /// wide as an attention pool's (`num_kv_heads * head_dim`).
    fn index_per_half(&self) -> usize {
        self.index.as_ref().map_or(0, |x| self.num_kv_heads * self.head_dim / x.head_dim.max(1))
    }

    /// Indexer-key pools (after the attention pools in `Cache::kv`).
    pub fn index_pools(&self) -> usize {
        let sparse = self.index.as_ref().map_or(0, |x| x.layers.iter().filter(|&&s| s).count());
        sparse.div_ceil(2 * self.index_per_half().max(1))
    }

    /// Where layer `i`'s indexer keys live, where it has an indexer: the indexer-key pool
    /// (counted from the first one), whether in the slots' V half, and the first column there.
    pub fn index_slot(&self, i: usize) -> Option<(usize, bool, usize)> {
        let x = self.index.as_ref()?;
        if !x.layers.get(i).copied().unwrap_or(false) {
            return None;
        }
        let nth = x.layers[..i].iter().filter(|&&s| s).count();
        let per_half = self.index_per_half().max(1);
        let unit = nth % (2 * per_half);
        Some((nth / (2 * per_half), unit >= per_half, (unit % per_half) * x.head_dim))
    }

    /// The layer whose K/V layer `i` reads, where `i` is KV-shared: the last layer of its kind
    /// before the first shared one.
    pub fn kv_source(&self, i: usize) -> Option<usize> {
        let first = self.kv_shared_from.filter(|&f| i >= f)?;
        let kind = self.layer_kinds.get(i)?;
        (0..first).rev().find(|&j| self.layer_kinds.get(j) == Some(kind))
    }

    /// Query heads of layer `i`.
    pub fn heads(&self, i: usize) -> usize {
        self.layer_heads.get(i).copied().unwrap_or(self.num_heads)
    }

    /// The clamp of layer `i`'s dense MLP and shared experts, where it has one.
    pub fn mlp_clamp(&self, i: usize) -> Option<f32> {
        self.mlp_clamp.get(i).copied().flatten()
    }

    /// The clamp of layer `i`'s routed experts, where it has one.
    pub fn expert_clamp(&self, i: usize) -> Option<f32> {
        self.expert_clamp.get(i).copied().flatten()
    }

    /// Width of layer `i`'s dense MLP.
    pub fn mlp_width(&self, i: usize) -> usize {
        match self.wide_mlp_from {
            Some(f) if i >= f => 2 * self.intermediate_size,
            _ => self.intermediate_size,
        }
    }

    /// KV heads and head width of attention layer `i`.
    pub fn attn_shape(&self, i: usize) -> (usize, usize) {
        match (self.layer_kinds.get(i), self.full_attn_shape) {
            (Some(LayerKind::Full), Some(shape)) => shape,
            _ => (self.num_kv_heads, self.head_dim),
        }
    }
}

/// Multi-head latent attention settings (DeepSeek V3, `blocks/mla.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaSpec {
    /// Rank of the query's low-rank projection (`q_lora_rank`; `None`: one `q_proj`).
    pub q_lora_rank: Option<usize>,
    /// Rank of the compressed key/value latent `c_kv` (`kv_lora_rank`).
    pub kv_lora_rank: usize,
    /// Width of a query / key head's part without rope (`qk_nope_head_dim`).
    pub qk_nope_head_dim: usize,
    /// Width of a query head's and the shared key's rope part (`qk_rope_head_dim`).
    pub qk_rope_head_dim: usize,
    /// Width of a value head (`v_head_dim`).
    pub v_head_dim: usize,
    /// The checkpoint's rope dims are interleaved pairs (`rope_interleave`): their projection
    /// rows are reordered at load to the rotate-half layout.
    pub rope_interleave: bool,
    /// DeepSeek sparse attention's lightning indexer (DeepSeek V3.2, GLM-5), where the layers
    /// attend over the keys it keeps; its key is cached after the latent row.
    pub indexer: Option<IndexerSpec>,
}

/// The lightning indexer of DeepSeek sparse attention (`blocks/dsa_indexer.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexerSpec {
    /// Indexer heads (`index_n_heads`).
    pub n_heads: usize,
    /// Width of an indexer head and of its cached key (`index_head_dim`); the first
    /// `qk_rope_head_dim` dims are roped.
    pub head_dim: usize,
    /// Keys each query keeps (`index_topk`).
    pub topk: usize,
    /// The indexer's rope dims are interleaved pairs (GLM-5; DeepSeek V3.2's are rotate-half):
    /// those rows of `wq_b`, `wk` and `k_norm` are reordered at load to the rotate-half layout.
    pub rope_interleave: bool,
}

impl MlaSpec {
    /// Width of a query head (`qk_nope_head_dim + qk_rope_head_dim`).
    pub fn qk_head_dim(&self) -> usize {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Width of a cached latent row (`kv_lora_rank + qk_rope_head_dim`).
    pub fn latent_dim(&self) -> usize {
        self.kv_lora_rank + self.qk_rope_head_dim
    }

    /// Width of a cached slot: the latent row, then the indexer's key where there is one.
    pub fn slot_dim(&self) -> usize {
        self.latent_dim() + self.indexer.map_or(0, |ix| ix.head_dim)
    }
}

/// Mamba2 settings (Nemotron-H).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MambaSpec {
    /// Heads `H` (`mamba_num_heads`).
    pub num_heads: usize,
    /// Width of a head `P` (`mamba_head_dim`).
    pub head_dim: usize,
    /// Groups of B and C (`n_groups`), dividing the heads.
    pub n_groups: usize,
    /// State size `N` (`ssm_state_size`).
    pub state_size: usize,
    /// Taps of the depthwise causal conv over x, B and C (`conv_kernel`).
    pub conv_kernel: usize,
    /// The conv has a bias (`use_conv_bias`).
    pub conv_bias: bool,
    /// `dt` is clamped into `[dt_min, dt_max]` after its softplus.
    pub dt_min: f32,
    /// See `dt_min`.
    pub dt_max: f32,
}

impl MambaSpec {
    /// Width of the scan's output and of the gate `z` (`H * P`).
    pub fn inner(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Channels of the conv (x, B and C).
    pub fn conv_dim(&self) -> usize {
        self.inner() + 2 * self.n_groups * self.state_size
    }
}

/// Short convolution settings (LFM2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// Taps of the depthwise causal conv (`conv_L_cache`); the window keeps one fewer inputs.
    pub kernel: usize,
    /// The conv and its in / out projections carry biases (`conv_bias`).
    pub bias: bool,
}

/// Gated DeltaNet settings (Qwen3-Next, Qwen3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnSpec {
    /// Key (and query) heads (`linear_num_key_heads`).
    pub num_k_heads: usize,
    /// Value heads (`linear_num_value_heads`), a multiple of the key heads.
    pub num_v_heads: usize,
    /// Width of a key head (`linear_key_head_dim`).
    pub head_k_dim: usize,
    /// Width of a value head (`linear_value_head_dim`).
    pub head_v_dim: usize,
    /// Taps of the depthwise causal conv over q, k and v (`linear_conv_kernel_dim`).
    pub conv_kernel: usize,
    /// The checkpoint fuses the input projections per key head (Qwen3-Next's `in_proj_qkvz`
    /// and `in_proj_ba`) instead of keeping them apart (Qwen3.5).
    pub fused_inputs: bool,
    /// `b` and `a` come fused per key head (Qwen3-Next's `in_proj_ba`; a Qwen3-Next GGUF keeps
    /// them so beside its split q, k, v and z).
    pub fused_ba: bool,
    /// The value heads are tiled over the key heads, as llama.cpp's GGUF files store them
    /// (`gguf_tiled_value_heads`, which the GGUF loader sets), not grouped by key head.
    pub tiled_v_heads: bool,
}

impl GdnSpec {
    /// Channels of the conv (q, k and v).
    pub fn conv_channels(&self) -> usize {
        2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
    }
}

/// Fields every family reads the same way.
pub struct Common {
    /// Embedding rows.
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// Dense MLP width.
    pub intermediate_size: usize,
    /// Layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// KV heads.
    pub num_kv_heads: usize,
    /// Head width.
    pub head_dim: usize,
    /// Norm epsilon.
    pub rms_norm_eps: f32,
    /// Longest context.
    pub max_position_embeddings: usize,
}

impl Common {
    /// Reads and checks the shared size fields, refusing `attention_bias`.
    pub fn read(c: &RawConfig) -> Result<Common, ModelError> {
        if c.flag("attention_bias", false)? {
            return Err(c.error("attention_bias / mlp_bias are not supported"));
        }
        Common::read_with_attention_bias(c)
    }

    /// [`Common::read`] for a family that loads q/k/v biases where `attention_bias` says so.
    pub fn read_with_attention_bias(c: &RawConfig) -> Result<Common, ModelError> {
        if c.flag("mlp_bias", false)? {
            return Err(c.error("attention_bias / mlp_bias are not supported"));
        }
        let hidden_size = c.dim("hidden_size")?;
        let num_heads = c.dim("num_attention_heads")?;
        let num_kv_heads = c.opt_dim("num_key_value_heads")?.unwrap_or(num_heads);
        let head_dim = match c.opt_dim("head_dim")? {
            Some(d) => d,
            None if hidden_size.is_multiple_of(num_heads) => hidden_size / num_heads,
            None => {
                return Err(
                    c.error(format!("num_attention_heads {num_heads} does not divide hidden_size {hidden_size}"))
                );
            }
        };
        if !num_heads.is_multiple_of(num_kv_heads) {
            return Err(
                c.error(format!("num_key_value_heads {num_kv_heads} does not divide num_attention_heads {num_heads}"))
            );
        }
        if !head_dim.is_multiple_of(2) {
            return Err(c.error(format!("head_dim {head_dim} must be even for rope")));
        }
        let rms_norm_eps = c.opt_f32("rms_norm_eps")?.unwrap_or(1e-6);
        if rms_norm_eps <= 0.0 {
            return Err(c.error(format!("rms_norm_eps must be positive, found {rms_norm_eps}")));
        }
        Ok(Common {
            vocab_size: c.dim("vocab_size")?,
            hidden_size,
            intermediate_size: c.dim("intermediate_size")?,
            num_layers: c.dim("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps,
            max_position_embeddings: c.opt_dim("max_position_embeddings")?.unwrap_or(4096),
        })
    }

    /// Layer kinds from `layer_types` when given, else all full.
    pub fn layer_kinds(&self, c: &RawConfig) -> Result<Vec<LayerKind>, ModelError> {
        let Some(types) = c.get("layer_types").and_then(|v| v.as_array()) else {
            return Ok(vec![LayerKind::Full; self.num_layers]);
        };
        if types.len() != self.num_layers {
            return Err(c.error(format!("layer_types has {} entries for {} layers", types.len(), self.num_layers)));
        }
        types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention") => Ok(LayerKind::Full),
                Some("sliding_attention") => Ok(LayerKind::Sliding),
                Some("conv") => Ok(LayerKind::Conv),
                Some("linear_attention") => Ok(LayerKind::GatedDeltaNet),
                _ => Err(c.error(format!("unknown layer type {t}"))),
            })
            .collect()
    }

    /// A rope for `layer_type`, over the full head width.
    pub fn rope(&self, c: &RawConfig, layer_type: &str, fallback_theta: f32) -> Result<Rope, ModelError> {
        let (theta, scaling): (f32, RopeScaling) = c.rope(layer_type, fallback_theta)?;
        let partial = crate::rope_check::partial(c, partial_factor(c, layer_type)?.unwrap_or(1.0))?;
        let dim = ((self.head_dim as f32 * partial) as usize) & !1;
        if dim == 0 || dim > self.head_dim || theta <= 0.0 {
            return Err(
                c.error(format!("rope over {dim} of {} head dims with theta {theta} makes no sense", self.head_dim))
            );
        }
        Ok(Rope::new(dim, theta, &scaling))
    }

    /// The spec with the fields common to all families filled in; families adjust the rest.
    pub fn spec(self, c: &RawConfig, architecture: &str, rope: Rope, act: Activation) -> Result<ModelSpec, ModelError> {
        let kinds = self.layer_kinds(c)?;
        self.spec_with_kinds(c, architecture, rope, act, kinds)
    }

    /// [`Common::spec`] with the layer kinds a family read itself (its own `layer_types` names).
    pub fn spec_with_kinds(
        self,
        c: &RawConfig,
        architecture: &str,
        rope: Rope,
        act: Activation,
        layer_kinds: Vec<LayerKind>,
    ) -> Result<ModelSpec, ModelError> {
        Ok(ModelSpec {
            architecture: architecture.to_string(),
            layer_kinds,
            sliding_window: None,
            rope_sliding: rope.clone(),
            rope_full: rope,
            long_rope: None,
            act,
            attn_scale: 1.0 / (self.head_dim as f32).sqrt(),
            embed_scale: 1.0,
            final_softcap: None,
            attn_softcap: None,
            qk_norm: false,
            qk_norm_full: false,
            sandwich_norms: false,
            norm_one_plus: false,
            moe: None,
            tie_word_embeddings: c.flag("tie_word_embeddings", false)?,
            bos_token_id: c.ids("bos_token_id")?,
            eos_token_id: c.ids("eos_token_id")?,
            pad_token_id: c.ids("pad_token_id")?,
            names: Names::default(),
            conv: None,
            gdn: None,
            attn_output_gate: false,
            attn_head_gate: false,
            mamba: None,
            attn_rope: true,
            one_part_layers: false,
            mlp_gated: true,
            mla: None,
            full_attn_shape: None,
            full_v_from_k: false,
            v_norm: false,
            per_layer_input: None,
            layer_scalar: false,
            kv_shared_from: None,
            kv_read_only: false,
            wide_mlp_from: None,
            dense_beside_experts: false,
            mtp: None,
            index: None,
            mlp_clamp: Vec::new(),
            expert_clamp: Vec::new(),
            layer_heads: Vec::new(),
            attention_bias: false,
            attn_out_bias: false,
            attn_sinks: false,
            unread_prefixes: Vec::new(),
            fused: Vec::new(),
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_layers,
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            rms_norm_eps: self.rms_norm_eps,
            max_position_embeddings: self.max_position_embeddings,
        })
    }
}

/// `partial_rotary_factor` where the config gives it: in `rope_parameters`' entry for
/// `layer_type` (transformers 5's per-layer-type form), in `rope_parameters`, or at the top level,
/// the first found.
fn partial_factor(c: &RawConfig, layer_type: &str) -> Result<Option<f32>, ModelError> {
    let params = c.get("rope_parameters");
    let nested = [params.and_then(|p| p.get(layer_type)), params]
        .into_iter()
        .flatten()
        .find_map(|p| p.get("partial_rotary_factor"));
    match nested {
        Some(v) => match v.as_f64() {
            Some(f) => Ok(Some(f as f32)),
            None => Err(c.error(format!("'partial_rotary_factor' must be a number, found {v}"))),
        },
        None => c.opt_f32("partial_rotary_factor"),
    }
}

/// A rope over `partial_rotary_factor` of each head (in `rope_parameters` or at the top level;
/// `default_partial` when neither says), `theta` from the config or `fallback_theta`.
pub fn partial_rope(
    c: &RawConfig,
    head_dim: usize,
    fallback_theta: f32,
    default_partial: f32,
) -> Result<Rope, ModelError> {
    let (theta, scaling) = c.rope("full_attention", fallback_theta)?;
    let dim = rotary_dim(c, head_dim, default_partial)?;
    if theta <= 0.0 {
        return Err(c.error(format!("rope over {dim} of {head_dim} head dims with theta {theta} makes no sense")));
    }
    Ok(Rope::new(dim, theta, &scaling))
}

/// The rotated dims of each head: `partial_rotary_factor` of `head_dim` (in `rope_parameters`
/// or at the top level; `default_partial` when neither says), rounded down to even.
pub fn rotary_dim(c: &RawConfig, head_dim: usize, default_partial: f32) -> Result<usize, ModelError> {
    let partial = match partial_factor(c, "full_attention")? {
        Some(f) => crate::rope_check::partial(c, f)?,
        None => default_partial,
    };
    let dim = ((head_dim as f32 * partial) as usize) & !1;
    if dim == 0 || dim > head_dim {
        return Err(c.error(format!("rope over {dim} of {head_dim} head dims makes no sense")));
    }
    Ok(dim)
}

/// The gated activation named by `hidden_act` / `hidden_activation`.
pub fn activation(c: &RawConfig, default: Activation) -> Result<Activation, ModelError> {
    match c.opt_str("hidden_activation").or_else(|| c.opt_str("hidden_act")) {
        None => Ok(default),
        Some("silu" | "swish") => Ok(Activation::Silu),
        Some("gelu_pytorch_tanh" | "gelu_tanh" | "gelu_new") => Ok(Activation::GeluTanh),
        Some(other) => Err(c.error(format!("activation '{other}' is not supported"))),
    }
}
