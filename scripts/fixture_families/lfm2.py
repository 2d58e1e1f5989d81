"""LFM2-family fixture builders (short convolution and attention layers), merged by
make_fixtures.py.

lfm2: layers conv, full, conv; double-gated short conv with conv_L_cache 3, attention with QK
norm (4 query heads, 2 KV heads of 16), SwiGLU MLP sized by the block_auto_adjust_ff_dim rule
(intermediate_size 128 -> int(2 * 128 / 3) = 85 -> rounded up to a multiple of 32 = 96), tied
embeddings, `embedding_norm` as the final norm.

lfm3: layers conv, sliding, conv, full (window 4); conv_L_cache 4; attention with q_norm /
k_norm and the per-head sigmoid gate g_proj; sandwich norms; the full layers' proportional rope
(partial_rotary_factor 0.5 of head_dim 16), the sliding layers' default rope; MLP of width 96.

lfm2_moe: layers conv, full, conv, conv; layer 0 a dense MLP of intermediate_size 96 (no
adjusting rule), layers 1-3 eight experts of 32, two chosen per token by sigmoid scores plus a
random expert_bias (choice only), renormalised, routed_scaling_factor 1.5. Sigmoid scores sit in
[0, 1], so over the golden forwards' hundreds of routing choices some 2nd-vs-3rd gaps are always
small enough for a bf16 run to flip; no seed avoids them. golden.json records instead, per prompt,
`route_exact_positions`: how many leading positions of prompt + greedy continuation route with a
margin of at least ROUTER_MARGIN in every layer. Outputs there cannot depend on a later choice (the
model is causal), so a bf16 backend is compared on them.
"""

from __future__ import annotations

import torch
from transformers import Lfm2Config, Lfm2ForCausalLM, Lfm2MoeConfig, Lfm2MoeForCausalLM, Lfm3Config, Lfm3ForCausalLM

VOCAB_SIZE = 512
ROUTER_MARGIN = 0.004  # lfm2_moe: k-th vs (k+1)-th of sigmoid(logit) + expert_bias
PAD, BOS, EOS = 0, 1, 2


def lfm2_kwargs():
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        norm_eps=1e-5,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    )


def make_lfm2():
    cfg = Lfm2Config(
        **lfm2_kwargs(),
        num_hidden_layers=3,
        layer_types=["conv", "full_attention", "conv"],
        conv_L_cache=3,
        conv_bias=False,
        block_auto_adjust_ff_dim=True,
        block_ffn_dim_multiplier=1.0,
        block_multiple_of=32,
        tie_word_embeddings=True,
    )
    return Lfm2ForCausalLM, cfg, torch.bfloat16


def make_lfm3():
    kw = lfm2_kwargs()
    kw["intermediate_size"] = 96
    kw["rope_parameters"] = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
    }
    cfg = Lfm3Config(
        **kw,
        head_dim=16,
        num_hidden_layers=4,
        layer_types=["conv", "sliding_attention", "conv", "full_attention"],
        sliding_window=4,
        conv_L_cache=4,
        conv_bias=False,
        use_sandwich_norm=True,
        use_attention_gate=True,
        tie_word_embeddings=True,
    )
    return Lfm3ForCausalLM, cfg, torch.bfloat16


def make_lfm2_moe():
    kw = lfm2_kwargs()
    kw["intermediate_size"] = 96
    cfg = Lfm2MoeConfig(
        **kw,
        num_hidden_layers=4,
        layer_types=["conv", "full_attention", "conv", "conv"],
        conv_L_cache=3,
        conv_bias=False,
        num_dense_layers=1,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        use_expert_bias=True,
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        tie_word_embeddings=True,
    )
    return Lfm2MoeForCausalLM, cfg, torch.bfloat16


@torch.no_grad()
def route_exact_positions(model, prompts, greedys) -> dict:
    """Per prompt, the leading positions of prompt + greedy[:-1] whose choice margin (k-th vs
    (k+1)-th of sigmoid(router logit) + expert_bias) is at least ROUTER_MARGIN in every layer."""
    k = model.config.num_experts_per_tok
    gaps = []

    def hook(mod, inp, _out):
        x = inp[0].reshape(-1, inp[0].shape[-1]).float()
        s = torch.nn.functional.linear(x, mod.gate.weight.float()).sigmoid()
        if mod.use_expert_bias:
            s = s + mod.expert_bias.float()
        top = s.topk(k + 1, dim=-1).values
        gaps.append(top[:, k - 1] - top[:, k])

    blocks = [m for m in model.modules() if type(m).__name__ == "Lfm2MoeSparseMoeBlock"]
    assert blocks
    handles = [m.register_forward_hook(hook) for m in blocks]
    exact = []
    try:
        for p, g in zip(prompts, greedys):
            gaps.clear()
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
            ok = torch.stack(gaps).min(0).values >= ROUTER_MARGIN
            exact.append(int(ok.long().cumprod(0).sum()))
    finally:
        for h in handles:
            h.remove()
    print(f"  lfm2_moe: route_exact_positions {exact}")
    return {"route_exact_positions": exact, "route_margin": ROUTER_MARGIN}


GOLDEN_EXTRA = {"lfm2_moe": route_exact_positions}

FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "lfm2_moe": (make_lfm2_moe, 7200, True),
    "lfm2": (make_lfm2, 7000, True),
    "lfm3": (make_lfm3, 7100, True),
}

WEIGHT_STD = {
    #          embed, lm_head, router, in-proj, out-proj
    "lfm2": (0.5, None, 0.3, 0.25, 0.3),
    "lfm3": (0.5, None, 0.3, 0.25, 0.3),
    "lfm2_moe": (0.5, None, 0.5, 0.25, 0.3),
}


def perturb_lfm2(model: torch.nn.Module, family: str, seed: int) -> None:
    """Seeded random values for every parameter (sorted by name): norms near 1, conv taps of
    a real kernel's size, output projections (`out_proj`, `w2`) at the out-proj scale."""
    e_std, h_std, r_std, in_std, out_std = WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "norm" in name:
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("conv.conv.weight"):
                v = 0.5 * r
            elif name.endswith(".bias"):
                v = 0.1 * r
            elif name.endswith("feed_forward.gate.weight"):  # MoE router
                v = r_std * r
            elif "out_proj" in name or "o_proj" in name or name.endswith("w2.weight"):
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("expert_bias"):  # LFM2-MoE's choice bias, zeros at init
                buf.copy_((0.1 * torch.randn(buf.shape, generator=g, dtype=torch.float32)).to(buf.dtype))


PERTURB = {"lfm2": perturb_lfm2, "lfm3": perturb_lfm2, "lfm2_moe": perturb_lfm2}

# transformers loads LFM3's `self_attn.gate_proj` (its checkpoint name) as `self_attn.g_proj`.
# LFM2-MoE saves each expert's w1 / w3 / w2, which make_fixtures.py's check knows as gate_proj /
# up_proj / down_proj of the fused experts.
EXPERT_NAMES = {".w1.weight": ".gate_proj.weight", ".w3.weight": ".up_proj.weight", ".w2.weight": ".down_proj.weight"}


def lfm2_moe_loaded_name(k: str) -> str:
    if ".experts." in k:
        for saved, loaded in EXPERT_NAMES.items():
            if k.endswith(saved):
                return k[: -len(saved)] + loaded
    return k


LOADED_NAME = {
    "lfm3": lambda k: k.replace(".self_attn.gate_proj.", ".self_attn.g_proj."),
    "lfm2_moe": lfm2_moe_loaded_name,
}
