"""Qwen3.5 / Qwen3-Next fixture builders (Gated DeltaNet and gated attention layers), merged by
make_fixtures.py.

qwen3_5: layers linear, full, linear (Gated DeltaNet, gated attention, Gated DeltaNet); 2 key
heads and 4 value heads of width 16 (value heads exceed key heads, so q and k are shared), conv
kernel 4, attention with QK norm, a query gate and partial rotary (0.25 of head_dim 32), zero
centred (1 + w) norms, dense MLP.

qwen3_next: the same layers with Gated DeltaNet's projections fused per key head
(`in_proj_qkvz`, `in_proj_ba`); layer 0 a dense MLP (`mlp_only_layers`), layers 1 and 2 eight
softmax top-2 experts with a sigmoid-gated shared expert. golden.json records
`route_exact_positions` as every MoE fixture does (make_fixtures.py's, on the router logits): the
seed's logit gaps, all >= MIN_ROUTER_MARGIN, clear ROUTE_MARGIN at every position.

qwen3_5_moe has no fixture: transformers reloads a `qwen3_5_moe_text` checkpoint's tokenizer as
its own Qwen3_5Tokenizer (not the fixture's tokenizer.json as written), which the shared
tokenizer check refuses; qwen3_next covers its experts and qwen3_5 its projections.
"""

from __future__ import annotations

import math

import torch
import sys

from transformers import (
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2


def gdn_kwargs():
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=128,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attention_bias=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25},
    )


def make_qwen3_5():
    cfg = Qwen3_5TextConfig(
        **gdn_kwargs(),
        num_hidden_layers=3,
        tie_word_embeddings=False,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
    )
    return Qwen3_5ForCausalLM, cfg, torch.bfloat16


MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48)
LAYERS = ["linear_attention", "full_attention", "linear_attention"]


def make_qwen3_next():
    cfg = Qwen3NextConfig(
        **gdn_kwargs(),
        **MOE,
        num_hidden_layers=3,
        tie_word_embeddings=False,
        layer_types=LAYERS,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
        norm_topk_prob=True,
    )
    return Qwen3NextForCausalLM, cfg, torch.bfloat16


FAMILIES = {
    "qwen3_5": (make_qwen3_5, 6000, False),
    "qwen3_next": (make_qwen3_next, 6100, False),
}

WEIGHT_STD = {
    #            embed, lm_head, router, in-proj, out-proj
    "qwen3_5": (0.5, 0.25, 0.3, 0.15, 0.15),
    "qwen3_next": (0.5, 0.25, 0.5, 0.15, 0.15),
}

# Norms that scale by (1 + w) (stored zero-centred); the gated norm inside Gated DeltaNet
# (`linear_attn.norm`) scales by w.
ZERO_CENTRED = ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "model.norm.weight")


def perturb_gdn(model: torch.nn.Module, family: str, seed: int) -> None:
    """Seeded random values for every parameter (sorted by name), with A_log, dt_bias and the
    conv kernel in the ranges real checkpoints have."""
    e_std, h_std, r_std, in_std, out_std = WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("A_log"):
                v = torch.log(torch.linspace(0.5, 8.0, p.shape[0])) + 0.1 * r
            elif name.endswith("dt_bias"):
                v = 1.0 + 0.5 * r
            elif "conv1d.weight" in name:
                v = 0.4 * r
            elif any(z in name for z in ZERO_CENTRED):
                v = 0.1 * r
            elif "norm" in name:
                v = 1.0 + 0.1 * r
            elif "embed_tokens" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("mlp.gate.weight") or name.endswith("shared_expert_gate.weight"):
                v = r_std * r
            elif any(o in name for o in ("o_proj", "down_proj", "out_proj")):
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))


PERTURB = {f: perturb_gdn for f in FAMILIES}


def router_margin_ok(model, prompts, greedys) -> bool:
    """Every token's 2nd vs 3rd router logit gap at least make_fixtures' MIN_ROUTER_MARGIN."""
    main = sys.modules["__main__"]
    return main.min_router_margin(model, prompts, greedys) >= main.MIN_ROUTER_MARGIN


ACCEPT = {"qwen3_next": router_margin_ok}
GOLDEN_EXTRA = {"qwen3_next": lambda *a: sys.modules["__main__"].route_exact_positions(*a)}
