"""Nemotron-H fixture builders (Mamba2 / attention / MLP / MoE layers), merged by make_fixtures.py.

nemotron_h: layers "M*M-M" (Mamba2, attention without rope, Mamba2, relu^2 MLP, Mamba2),
n_groups 2, ssm_state_size 16, conv kernel 4 with bias, 8 Mamba heads of width 8, chunk size 8
(so transformers' chunked scan crosses chunk boundaries in the longer prompts), and dt_bias
values low enough on some heads that softplus falls under time_step_min (the clamp is exercised).

nemotron_h_moe: layers "ME*E" (Mamba2, MoE, attention, MoE); MoE layers of 8 ungated relu^2
experts behind a latent projection, sigmoid routing with a random e_score_correction_bias in 2
groups (1 kept), top 2. No seed is drawn for router margins, so golden.json records per prompt
`route_exact_positions` (make_fixtures.py's, at its ROUTE_MARGIN 0.004, over the expert and the
group choice): how many leading positions of prompt + greedy continuation route with that margin
in every MoE layer, the ones a bf16 backend is compared on (prompt 3 has a 0.0005 gap at
position 26).
"""

from __future__ import annotations

import math
import sys

import torch
from transformers import NemotronHConfig, NemotronHForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2


def nemotron_kwargs():
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        layer_norm_epsilon=1e-5,
        max_position_embeddings=256,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attention_bias=False,
        mlp_bias=False,
        use_bias=False,
        mlp_hidden_act="relu2",
        tie_word_embeddings=False,
        ssm_state_size=16,
        mamba_num_heads=8,
        mamba_head_dim=8,
        n_groups=2,
        conv_kernel=4,
        use_conv_bias=True,
        chunk_size=8,
        time_step_min=0.001,
        residual_in_fp32=False,
    )


def make_nemotron_h():
    cfg = NemotronHConfig(**nemotron_kwargs(), layers_block_type=[
        "linear_attention", "full_attention", "linear_attention", "mlp", "linear_attention"
    ])
    return NemotronHForCausalLM, cfg, torch.bfloat16


FAMILIES = {
    "nemotron_h": (make_nemotron_h, 5000, True),
}

WEIGHT_STD = {
    #            embed, lm_head, router, in-proj, out-proj
    "nemotron_h": (0.5, 0.5, 0.3, 0.12, 0.12),
}


def perturb_nemotron(model: torch.nn.Module, family: str, seed: int) -> None:
    """Seeded random values for every parameter (sorted by name), with Mamba2's A_log, dt_bias,
    D and conv weights drawn in the ranges real checkpoints have."""
    e_std, h_std, r_std, in_std, out_std = WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("A_log"):
                v = torch.log(torch.linspace(1.0, 8.0, p.shape[0])) + 0.1 * r
            elif name.endswith("dt_bias"):
                # inverse softplus of dt in [1e-3, 0.1]; two heads far lower, under time_step_min
                u = torch.rand(p.shape, generator=g)
                dt = torch.exp(u * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                v = dt + torch.log(-torch.expm1(-dt))
                v[1] = -9.0
                v[5] = -10.0
            elif name.endswith(".D"):
                v = 1.0 + 0.3 * r
            elif "conv1d.weight" in name:
                v = 0.4 * r
            elif "conv1d.bias" in name:
                v = 0.1 * r
            elif "norm" in name:
                v = 1.0 + 0.1 * r
            elif "embeddings" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("gate.weight"):
                v = r_std * r
            elif "o_proj" in name or "down_proj" in name or "out_proj" in name:
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))


PERTURB = {"nemotron_h": perturb_nemotron}

# Nemotron-H checkpoints (and transformers' save_pretrained) name the model `backbone.*`.
LOADED_NAME = {"nemotron_h": lambda k: "model." + k[len("backbone."):] if k.startswith("backbone.") else k}


def make_nemotron_h_moe():
    cfg = NemotronHConfig(
        **nemotron_kwargs(),
        layers_block_type=["linear_attention", "moe", "full_attention", "moe"],
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=48,
        moe_latent_size=32,
        n_group=2,
        topk_group=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
    )
    return NemotronHForCausalLM, cfg, torch.bfloat16


def perturb_nemotron_moe(model: torch.nn.Module, family: str, seed: int) -> None:
    """perturb_nemotron, and a random router choice bias (a buffer, not a parameter)."""
    perturb_nemotron(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, b in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                b.copy_((0.2 * torch.randn(b.shape, generator=g)).to(b.dtype))


FAMILIES["nemotron_h_moe"] = (make_nemotron_h_moe, 6000, True)
WEIGHT_STD["nemotron_h_moe"] = (0.5, 0.5, 0.5, 0.12, 0.12)
PERTURB["nemotron_h_moe"] = perturb_nemotron_moe
LOADED_NAME["nemotron_h_moe"] = LOADED_NAME["nemotron_h"]
GOLDEN_EXTRA = {"nemotron_h_moe": lambda *a: sys.modules["__main__"].route_exact_positions(*a)}
