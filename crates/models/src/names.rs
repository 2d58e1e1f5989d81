//! The tensor names a family's checkpoints use for the parts the shared blocks load: Hugging
//! Face's Llama names by default, a family's own where it differs (LFM2's `operator_norm`,
//! `feed_forward.w1`, ...).

/// Tensor names, relative to the model (`model.`) or to a layer (`model.layers.{i}.`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The embedding table, whole name.
    pub embed: &'static str,
    /// The prefix of layer `i`'s tensors, before `{i}.`.
    pub layers: &'static str,
    /// The final norm's weight, whole name.
    pub final_norm: &'static str,
    /// The untied head's weight, whole name.
    pub lm_head: &'static str,
    /// A layer's token mixer's input norm.
    pub input_norm: &'static str,
    /// The FFN's input norm, or with sandwich norms the norm of the mixer's output.
    pub post_mixer_norm: &'static str,
    /// With sandwich norms, the FFN's input norm.
    pub pre_ffn_norm: &'static str,
    /// With sandwich norms, the norm of the FFN's output.
    pub post_ffn_norm: &'static str,
    /// The attention module.
    pub attn: &'static str,
    /// The per-head query and key norms inside the attention module.
    pub qk_norm: [&'static str; 2],
    /// The attention's output projection inside its module.
    pub attn_out: &'static str,
    /// The MLP module.
    pub mlp: &'static str,
    /// The dense MLP's gate, up and down projections inside its module.
    pub gate_up_down: [&'static str; 3],
}

impl Default for Names {
    fn default() -> Names {
        Names {
            embed: "model.embed_tokens.weight",
            layers: "model.layers.",
            final_norm: "model.norm.weight",
            lm_head: "lm_head.weight",
            input_norm: "input_layernorm",
            post_mixer_norm: "post_attention_layernorm",
            pre_ffn_norm: "pre_feedforward_layernorm",
            post_ffn_norm: "post_feedforward_layernorm",
            attn: "self_attn",
            qk_norm: ["q_norm", "k_norm"],
            attn_out: "o_proj",
            mlp: "mlp",
            gate_up_down: ["gate_proj", "up_proj", "down_proj"],
        }
    }
}
