"""DeepSeek-V3-style fixture builders (`DeepseekV3ForCausalLM`), merged by make_fixtures.py.

deepseek_v3: 3 layers, layer 0 dense (`first_k_dense_replace` 1), layers 1-2 MoE exactly as
glm4_moe's (8 routed experts of width 32 in 2 groups, `topk_group` 1, top-2, sigmoid scores
with a random `e_score_correction_bias` for choosing, `norm_topk_prob`, `routed_scaling_factor`
2.5, one shared expert); multi-head latent attention with 4 heads: `q_lora_rank` 48,
`kv_lora_rank` 32, `qk_nope_head_dim` 24, `qk_rope_head_dim` 16, `v_head_dim` 20 (all
different), `rope_interleave`, YaRN rope scaling (factor 4 over 64 original positions, `mscale`
1 and `mscale_all_dim` 0.8: the rope's attention factor and the softmax scale both move).
deepseek_v3_nolora: the same with `q_lora_rank` null (one `q_proj`), `rope_interleave` off and
plain rope. bf16. Weights are accepted only when every router choice clears ROUTER_MARGIN (the
glm4_moe rule); golden.json records `route_exact_positions` as glm4_moe's does.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score, topk_group-th vs next group score


def config(**over) -> DeepseekV3Config:
    kw = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
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
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_nope_head_dim=24,
        qk_rope_head_dim=16,
        v_head_dim=20,
        rope_interleave=True,
        hidden_act="silu",
        rms_norm_eps=1e-5,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 64,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
        num_nextn_predict_layers=0,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    kw.update(over)
    return DeepseekV3Config(**kw)


def make_deepseek_v3():
    return DeepseekV3ForCausalLM, config(), torch.bfloat16


def make_deepseek_v3_nolora():
    cfg = config(q_lora_rank=None, rope_interleave=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return DeepseekV3ForCausalLM, cfg, torch.bfloat16


def perturb_deepseek_v3(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation, then the routers' e_score_correction_bias buffers N(0, 0.15^2)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.15 * torch.randn(buf.shape, generator=g)).to(buf.dtype))


def accept_deepseek_v3(model, prompts, greedys) -> bool:
    m = min(float(g.min()) for g in mf.route_choice_gaps(model, prompts, greedys))
    print(f"  router margin {m:.4f}")
    return m >= ROUTER_MARGIN


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "deepseek_v3": (make_deepseek_v3, 9000, False),
    "deepseek_v3_nolora": (make_deepseek_v3_nolora, 9500, False),
}

WEIGHT_STD = {
    #              embed, lm_head, router, in-proj, out-proj
    "deepseek_v3": (0.5, 0.5, 0.5, 0.12, 0.12),
    "deepseek_v3_nolora": (0.5, 0.5, 0.5, 0.12, 0.12),
}

PERTURB = {f: perturb_deepseek_v3 for f in FAMILIES}
ACCEPT = {f: accept_deepseek_v3 for f in FAMILIES}
GOLDEN_EXTRA = {f: (lambda *a: mf.route_exact_positions(*a)) for f in FAMILIES}
