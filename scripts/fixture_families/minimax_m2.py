"""MiniMax-M2 fixture builder (`MiniMaxM2ForCausalLM`), merged by make_fixtures.py.

minimax_m2: 3 layers, each attention then 8 experts of width 32 (`intermediate_size`), 2 a
token, chosen by sigmoid scores plus a random `e_score_correction_bias` and weighted by the
chosen sigmoid scores renormalised; the QK norm over each token's whole q (4 heads of 32) and
k (2 heads) projections; partial rotary 0.5 (16 of 32 dims). bf16. transformers saves the
checkpoint as released ones are (`block_sparse_moe.experts.{e}.w1/w3/w2`,
`block_sparse_moe.e_score_correction_bias`) and loads it fused under `mlp.`. Weights are
accepted only when every token's router choice is separated by ROUTER_MARGIN in the biased
scores, so an f32 implementation cannot choose differently through rounding. A bf16 run can
still flip the narrower choices, so golden.json records per prompt `route_exact_positions`: how
many leading positions of prompt + greedy continuation route with a margin of at least
BF16_MARGIN in every layer (the causal model's outputs there cannot depend on a later choice).
"""

from __future__ import annotations

import re

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import MiniMaxM2Config, MiniMaxM2ForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score, every choice of the f32 golden forwards
BF16_MARGIN = 0.004  # the same gap, for the positions a bf16 run is compared on


def make_minimax_m2():
    cfg = MiniMaxM2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=32,
        num_hidden_layers=3,
        num_local_experts=8,
        num_experts_per_tok=2,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return MiniMaxM2ForCausalLM, cfg, torch.bfloat16


def perturb_minimax_m2(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation, then the routers' e_score_correction_bias buffers N(0, 0.15^2)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.15 * torch.randn(buf.shape, generator=g)).to(buf.dtype))


def loaded_name(saved: str) -> str:
    """A saved tensor's name as make_fixtures.py's checks expect it (transformers' `mlp.` and
    gate / up / down per expert)."""
    name = saved.replace(".block_sparse_moe.", ".mlp.")
    return re.sub(r"\.experts\.(\d+)\.w([123])\.", lambda m: f".experts.{m[1]}.{ {'1': 'gate', '3': 'up', '2': 'down'}[m[2]] }_proj.", name)


@torch.no_grad()
def router_gaps(model, prompts, greedys) -> list:
    """Per prompt, each position's smallest gap over the layers between the k-th and (k+1)-th
    biased score, over the golden forwards of prompt + greedy[:-1]."""
    gaps, out = [], []

    def hook(mod, inp, res):
        scores = res[0].float().sigmoid() + inp[1].float()
        top = scores.topk(mod.top_k + 1, dim=-1).values
        gaps.append(top[:, mod.top_k - 1] - top[:, mod.top_k])

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "MiniMaxM2TopKRouter"]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            gaps.clear()
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
            out.append(torch.stack(gaps).min(0).values)
    finally:
        for h in handles:
            h.remove()
    return out


def accept_minimax_m2(model, prompts, greedys) -> bool:
    m = min(float(g.min()) for g in router_gaps(model, prompts, greedys))
    print(f"  minimax_m2: router margin {m:.4f}")
    return m >= ROUTER_MARGIN


def route_exact_positions(model, prompts, greedys) -> dict:
    exact = [int((g >= BF16_MARGIN).long().cumprod(0).sum()) for g in router_gaps(model, prompts, greedys)]
    print(f"  minimax_m2: route_exact_positions {exact}")
    return {"route_exact_positions": exact, "route_margin": BF16_MARGIN}


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "minimax_m2": (make_minimax_m2, 9000, False),
}

WEIGHT_STD = {
    #              embed, lm_head, router, in-proj, out-proj
    "minimax_m2": (0.5, 0.5, 0.5, 0.12, 0.12),
}

PERTURB = {"minimax_m2": perturb_minimax_m2}
ACCEPT = {"minimax_m2": accept_minimax_m2}
LOADED_NAME = {"minimax_m2": loaded_name}
GOLDEN_EXTRA = {"minimax_m2": route_exact_positions}
