"""Qwen3.5 / Qwen3-Next fixture builders (Gated DeltaNet and gated attention layers), merged by
make_fixtures.py.

qwen3_5: layers linear, full, linear (Gated DeltaNet, gated attention, Gated DeltaNet); 2 key
heads and 4 value heads of width 16 (value heads exceed key heads, so q and k are shared), conv
kernel 4, attention with QK norm, a query gate and partial rotary (0.25 of head_dim 32), zero
centred (1 + w) norms, dense MLP. Its Gated DeltaNet k rows (of `in_proj_qkv` and the conv
kernel) are QK_CORR * q's + sqrt(1 - QK_CORR^2) * their own random values, and its seed is
accepted only when the f32 model with every projection's input rounded to bf16 (bf16_rel_errors)
stays within BF16_REL_BOUND (1.5%) of the f32 logits for every prompt, well inside the bf16
golden tests' 2.5%. The gated delta rule's output for a token is about beta * (q.k) * v plus
decayed earlier terms; with independent q and k, q.k nearly cancels for some token and head, the
gated RMS norm right after rescales that tiny output to full size, and the inputs' bf16 rounding
becomes several percent of the logits (no independent-q/k seed of 6000-6099 came within 3%).

qwen3_next: the same layers with Gated DeltaNet's projections fused per key head
(`in_proj_qkvz`, `in_proj_ba`); layer 0 a dense MLP (`mlp_only_layers`), layers 1 and 2 eight
softmax top-2 experts with a sigmoid-gated shared expert. golden.json records
`route_exact_positions` as every MoE fixture does (make_fixtures.py's, on the router logits).
Its Gated DeltaNet k rows are correlated with q as qwen3_5's (per key head in the fused
`in_proj_qkvz`, see qk_rows), and a seed is accepted when router_margin_ok (every router logit
gap >= MIN_ROUTER_MARGIN; checked first, on the prompts alone before greedy decoding) and bf16_ok
with a 2% bound (BF16_REL_BOUND_FOR): no seed of 6100-7099 passed both at 1.5% (best 1.65%).
Seed 6376 gives 1.65%, 1.23%, 1.15%, 1.46%; the earlier independent-q/k seed 6161 gave 9.5%,
5.6%, 22%, 1.4%.

qwen3_5_moe has no fixture: transformers reloads a `qwen3_5_moe_text` checkpoint's tokenizer as
its own Qwen3_5Tokenizer (not the fixture's tokenizer.json as written), which the shared
tokenizer check refuses; qwen3_next covers its experts and qwen3_5 its projections.
"""

from __future__ import annotations

import math
import sys

import torch

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

BF16_REL_BOUND = 0.015  # qwen3_5; see the module docstring
# qwen3_next: no seed of 6100-7099 passes both router_margin_ok and 1.5% (best 1.65%, seed 6376)
BF16_REL_BOUND_FOR = {"qwen3_next": 0.02}


def family_of(model) -> str:
    return "qwen3_next" if hasattr(model.config, "num_experts") else "qwen3_5"
# qwen3_5: k's rows of `in_proj_qkv` and of the conv kernel are QK_CORR * q's + sqrt(1 - QK_CORR^2)
# * their own random values, so q.k does not cancel (see the module docstring).
QK_CORR = {"qwen3_5": 0.8, "qwen3_next": 0.8}

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
        rho = QK_CORR.get(family)
        for name, m in sorted(model.named_modules(), key=lambda kv: kv[0]) if rho else []:
            if name.endswith("linear_attn"):
                for q, k in qk_rows(m):
                    k.copy_((rho * q.float() + math.sqrt(1 - rho * rho) * k.float()).to(k.dtype))


def qk_rows(m) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A Gated DeltaNet layer's (q, k) weight row views: of its input projection and of the conv
    kernel. The conv runs over the channels q (all key heads), k, v in that order in both models.
    Qwen3.5's `in_proj_qkv` has the same order; Qwen3-Next's `in_proj_qkvz` is grouped per key
    head: q, k (head_k_dim rows each), then that head's value heads' v and z rows
    (transformers' fix_query_key_value_ordering)."""
    kd, hk = m.key_dim, m.head_k_dim
    conv = m.conv1d.weight
    if hasattr(m, "in_proj_qkvz"):
        w = m.in_proj_qkvz.weight.view(m.num_k_heads, -1, m.in_proj_qkvz.weight.shape[-1])
        proj = (w[:, :hk], w[:, hk : 2 * hk])
    else:
        w = m.in_proj_qkv.weight
        proj = (w[:kd], w[kd : 2 * kd])
    return [proj, (conv[:kd], conv[kd : 2 * kd])]


PERTURB = {f: perturb_gdn for f in FAMILIES}


def router_margin_ok(model, prompts, greedys) -> bool:
    """Every token's 2nd vs 3rd router logit gap at least make_fixtures' MIN_ROUTER_MARGIN."""
    main = sys.modules["__main__"]
    m = main.min_router_margin(model, prompts, greedys)
    print(f"  router margin {m:.4f}")
    return m >= main.MIN_ROUTER_MARGIN


def _bf16_matmul_inputs(_mod, args):
    return (args[0].to(torch.bfloat16).float(), *args[1:])


@torch.no_grad()
def bf16_rel_errors(model, prompts, greedys, routed: bool) -> list[float]:
    """Per prompt, max |bf16-rounded logits - f32 logits| over the positions of prompt +
    greedy[:-1], as a fraction of the prompt's largest |f32 logit| (the golden tests' scale). The
    bf16-rounded run is the f32 model (whose weights are the saved bf16 ones) with every
    projection's and the experts' input rounded to bf16, as a bf16 backend's matmuls take them.
    A routed model is compared on its route-exact positions (make_fixtures' ROUTE_MARGIN), as the
    bf16 golden test is: past them a bf16 run may route differently."""
    main = sys.modules["__main__"]
    gaps = main.route_choice_gaps(model, prompts, greedys) if routed else None
    mods = [m for m in model.modules() if isinstance(m, torch.nn.Linear) or type(m).__name__.endswith("Experts")]
    errs = []
    for i, (p, g) in enumerate(zip(prompts, greedys)):
        ids = torch.tensor([p["ids"] + g[:-1]])
        want = model(input_ids=ids, use_cache=False).logits[0].float()
        hs = [m.register_forward_pre_hook(_bf16_matmul_inputs) for m in mods]
        try:
            got = model(input_ids=ids, use_cache=False).logits[0].float()
        finally:
            for h in hs:
                h.remove()
        n = max(int((gaps[i] >= main.ROUTE_MARGIN).long().cumprod(0).sum()), 1) if routed else len(want)
        scale = float(want[: len(p["ids"])].abs().max())
        errs.append(float((got[:n] - want[:n]).abs().max()) / scale)
    return errs


def bf16_ok(model, prompts, greedys) -> bool:
    """Every prompt's bf16-rounded logits within BF16_REL_BOUND of the f32 ones (see the module
    docstring for why a seed can fail this)."""
    errs = bf16_rel_errors(model, prompts, greedys, routed=hasattr(model.config, "num_experts"))
    bound = BF16_REL_BOUND_FOR.get(family_of(model), BF16_REL_BOUND)
    print(f"  bf16-rounded vs f32 logits: {[round(e, 4) for e in errs]} of the largest |logit| (bound {bound})")
    return max(errs) <= bound


def router_margin_and_bf16_ok(model, prompts, greedys) -> bool:
    """qwen3_next: router_margin_ok (cheap; about 1 seed in 100 passes it) and then bf16_ok."""
    return router_margin_ok(model, prompts, greedys) and bf16_ok(model, prompts, greedys)


ACCEPT = {"qwen3_5": bf16_ok, "qwen3_next": router_margin_and_bf16_ok}


def prompt_router_margin_ok(model, prompts) -> bool:
    """router_margin_ok on the prompts' own positions (the greedy continuation comes later): the
    causal router logits there are the same, so a seed failing this fails router_margin_ok."""
    main = sys.modules["__main__"]
    return main.min_router_margin(model, prompts, [[0]] * len(prompts)) >= main.MIN_ROUTER_MARGIN


PRECHECK = {"qwen3_next": prompt_router_margin_ok}
# Seeds tried before giving up (make_fixtures' default 200): qwen3_next needs both rules.
ATTEMPTS = {"qwen3_next": 1000}
GOLDEN_EXTRA = {"qwen3_next": lambda *a: sys.modules["__main__"].route_exact_positions(*a)}
