"""gpt-oss fixture builder (`GptOssForCausalLM`), merged by make_fixtures.py.

gpt_oss: 2 layers (sliding over 8, then full), 4 query heads and 2 KV heads of 16, q/k/v/o
biases, per-head sinks drawn N(0, 1) so they take a visible share of each softmax; YaRN rope
(factor 4 over 64 original positions, `truncate` false); every layer 4 experts of width 32, 2 a
token, routed by a linear with a bias (softmax over the top two logits), experts stored fused
and input-first with biases, the clamped SwiGLU (limit 7, alpha 1.702, `up + 1`). bf16. Weights
are accepted only when every router choice of the golden forwards is separated by ROUTER_MARGIN
in the logits, so an f32 implementation cannot choose differently through rounding.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import GptOssConfig, GptOssForCausalLM

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002


def make_gpt_oss():
    cfg = GptOssConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        rms_norm_eps=1e-5,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        attention_bias=True,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 64,
            "rope_theta": 150000.0,
        },
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return GptOssForCausalLM, cfg, torch.bfloat16


def perturb_gpt_oss(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation, then the sinks N(0, 1) and the routers' weights and biases
    N(0, 0.5^2)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("self_attn.sinks"):
                p.copy_(torch.randn(p.shape, generator=g).to(p.dtype))
            elif ".mlp.router." in name:
                p.copy_((0.5 * torch.randn(p.shape, generator=g)).to(p.dtype))


@torch.no_grad()
def router_margin(model, prompts, greedys) -> float:
    """Smallest gap between the k-th and (k+1)-th router logit over the golden forwards."""
    gaps = []

    def hook(mod, _inp, out):
        top = out[0].float().topk(mod.top_k + 1, dim=-1).values
        gaps.append(float((top[:, mod.top_k - 1] - top[:, mod.top_k]).min()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "GptOssTopKRouter"]
    assert handles
    try:
        for p, gr in zip(prompts, greedys):
            model(input_ids=torch.tensor([p["ids"] + gr[:-1]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def accept_gpt_oss(model, prompts, greedys) -> bool:
    m = router_margin(model, prompts, greedys)
    print(f"  gpt_oss: router margin {m:.4f}")
    return m >= ROUTER_MARGIN


FAMILIES = {"gpt_oss": (make_gpt_oss, 42000, False)}
WEIGHT_STD = {
    #            embed, lm_head, router, in-proj, out-proj
    "gpt_oss": (0.5, 0.5, 0.5, 0.12, 0.12),
}
PERTURB = {"gpt_oss": perturb_gpt_oss}
ACCEPT = {"gpt_oss": accept_gpt_oss}
# A bf16 run is compared on the leading positions whose router logit gaps clear this margin
# (make_fixtures.py `route_exact_positions`; the router's top-k is over its logits): the CUDA
# backend's router reads f32 activations that drift from transformers' by up to about 1%, a few
# hundredths of a logit here.
ROUTE_BF16_MARGIN = 0.03
GOLDEN_EXTRA = {"gpt_oss": lambda *a: mf.route_exact_positions(*a, margin=ROUTE_BF16_MARGIN)}
