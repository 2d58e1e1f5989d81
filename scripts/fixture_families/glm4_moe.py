"""GLM-4.5-style MoE fixture builder (`Glm4MoeForCausalLM`), merged by make_fixtures.py.

glm4_moe: 3 layers, layer 0 dense (`first_k_dense_replace` 1), layers 1-2 MoE: 8 routed experts
of width 32 in 2 groups (`n_group` 2, `topk_group` 1: a token's 2 experts come from one group of
4), sigmoid scores with a random `e_score_correction_bias` (for choosing only),
`norm_topk_prob`, `routed_scaling_factor` 2.5, one shared expert; attention with q/k/v biases
(`attention_bias`), QK norm (`use_qk_norm`), head_dim 32 explicit, partial rotary 0.5 (16 of 32
dims rotated). bf16. Weights are accepted only when every token's router choice is separated by
ROUTER_MARGIN in the biased scores (experts and groups), so an f32 implementation cannot choose
differently through rounding. A bf16 run can still flip the narrower choices, so golden.json
records per prompt `route_exact_positions` (make_fixtures.py's, at its ROUTE_MARGIN 0.004, over
the expert and the group choice): how many leading positions of prompt + greedy continuation
route with that margin in every MoE layer, the ones a bf16 backend is compared on.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score, topk_group-th vs next group score


def make_glm4_moe():
    cfg = Glm4MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        routed_scaling_factor=2.5,
        norm_topk_prob=True,
        use_qk_norm=True,
        attention_bias=True,
        hidden_act="silu",
        rms_norm_eps=1e-5,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
        num_nextn_predict_layers=0,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return Glm4MoeForCausalLM, cfg, torch.bfloat16


def perturb_glm4_moe(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation, then random biases: q/k/v biases are parameters (done there);
    the routers' e_score_correction_bias buffers get N(0, 0.15^2)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.15 * torch.randn(buf.shape, generator=g)).to(buf.dtype))


@torch.no_grad()
def router_margin(model, prompts, greedys) -> float:
    """Smallest choice margin over every router call of the golden forwards: between the k-th
    and (k+1)-th biased score among the kept groups' experts, and between the topk_group-th and
    next group score."""
    gaps = []

    def hook(mod, _inp, out):
        scores = out[0].float().sigmoid() + mod.e_score_correction_bias.float()
        ng, tg, k = mod.num_group, mod.topk_group, mod.top_k
        grouped = scores.view(-1, ng, scores.shape[-1] // ng)
        gs = grouped.topk(2, dim=-1).values.sum(-1)
        top_g = gs.topk(min(tg + 1, ng), dim=-1)
        if tg < ng:
            gaps.append(float((top_g.values[:, tg - 1] - top_g.values[:, tg]).min()))
        mask = torch.zeros_like(gs).scatter_(1, top_g.indices[:, :tg], 1.0).bool()
        kept = grouped.masked_fill(~mask.unsqueeze(-1), float("-inf")).view(scores.shape)
        top = kept.topk(k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "Glm4MoeTopkRouter"]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def accept_glm4_moe(model, prompts, greedys) -> bool:
    m = router_margin(model, prompts, greedys)
    print(f"  glm4_moe: router margin {m:.4f}")
    return m >= ROUTER_MARGIN


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "glm4_moe": (make_glm4_moe, 8000, False),
}

WEIGHT_STD = {
    #              embed, lm_head, router, in-proj, out-proj
    "glm4_moe": (0.5, 0.5, 0.5, 0.12, 0.12),
}

PERTURB = {"glm4_moe": perturb_glm4_moe}
ACCEPT = {"glm4_moe": accept_glm4_moe}
GOLDEN_EXTRA = {"glm4_moe": lambda *a: mf.route_exact_positions(*a)}
