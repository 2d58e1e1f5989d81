"""Gemma 4 text fixture builder (`Gemma4ForCausalLM`, `gemma4_text`), merged by make_fixtures.py.

gemma4: 4 layers (sliding, full, sliding, full), sliding window 8; sliding layers 2 KV heads of
16, full layers `global_head_dim` 32 with one KV head (`num_global_key_value_heads`) whose V is
its K projection (`attention_k_eq_v`); plain-`w` RMSNorms on q and k per head, an unscaled norm
on v, attention scale 1; rope 10000 on sliding layers, `proportional` rope (theta 1e6, a quarter
of each head's pairs rotated) on full layers; per-layer input embeddings of 8 per layer
(`hidden_size_per_layer_input`) gated into each layer; random `layer_scalar` buffers; final
logit soft-capping 30; tied embeddings. bf16. No KV sharing, no MoE block.

gemma4_kvshare: the same with 6 layers (sliding, full, three times) whose last 2 are KV-shared
(`num_kv_shared_layers` 2: layer 4 reads layer 2's K/V, layer 5 layer 3's; no K/V projections of
their own) with MLPs twice as wide (`use_double_wide_mlp`).

gemma4_wide: gemma4 with full layers of `global_head_dim` 64 (one KV head): their KV slots are
twice as wide as the sliding layers' (64 against 2 x 16), as the released checkpoints' are (512
against 256), so the KV pools of one model differ in width (sessions, preemption, prefix hits).

gemma4_moe: 4 layers of the same attention with the MoE block (`enable_moe_block`: 8 experts of
32, top-2, beside the dense MLP in every layer; random `router.scale` and
`router.per_expert_scale`) and no per-layer inputs (`hidden_size_per_layer_input` 0, as the
larger models). Weights are accepted only when every token's top-2 choice is separated by
ROUTER_MARGIN in the router's logits, so an f32 implementation cannot choose differently
through rounding.
"""

from __future__ import annotations

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th router logit
ROUTER_STD = 3.0  # router.proj: peaked choices
QK_NORM_GAIN = 0.5
POST_NORM_GAIN = 3.0  # branch outputs strong enough against the scaled, tied embedding


def make_gemma4(**over):
    kwargs = dict(
        vocab_size=VOCAB_SIZE,
        vocab_size_per_layer_input=VOCAB_SIZE,
        hidden_size=64,
        hidden_size_per_layer_input=8,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        hidden_activation="gelu_pytorch_tanh",
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
        },
        final_logit_softcapping=30.0,
        num_kv_shared_layers=0,
        enable_moe_block=False,
        tie_word_embeddings=True,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    kwargs.update(over)
    return Gemma4ForCausalLM, Gemma4TextConfig(**kwargs), torch.bfloat16


def make_gemma4_kvshare():
    return make_gemma4(
        num_hidden_layers=6,
        layer_types=["sliding_attention", "full_attention"] * 3,
        num_kv_shared_layers=2,
        use_double_wide_mlp=True,
    )


def make_gemma4_wide():
    return make_gemma4(global_head_dim=64)


def make_gemma4_moe():
    return make_gemma4(
        hidden_size_per_layer_input=0,
        enable_moe_block=True,
        num_experts=8,
        top_k_experts=2,
        moe_intermediate_size=32,
    )


@torch.no_grad()
def router_margin(model, prompts, greedys) -> float:
    """Smallest gap between the k-th and (k+1)-th router logit (log-probability) over every router
    call of the golden forwards."""
    gaps = []

    def hook(mod, _inp, out):
        logp = out[0].double().log()
        k = mod.config.top_k_experts
        top = logp.topk(k + 1, dim=-1).values
        gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if type(m).__name__ == "Gemma4TextRouter"]
    assert handles
    try:
        for p, g in zip(prompts, greedys):
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return min(gaps)


def router_choice_gaps(mod, out) -> torch.Tensor:
    """The k-th vs (k+1)-th router log-probability of each token (transformers takes the top k of
    the softmax, whose order is the logits'; the gap is the logits' gap): what a bf16 run's
    rounding must not close (make_fixtures.py `route_exact_positions`)."""
    k = mod.config.top_k_experts
    top = out[0].double().log().topk(k + 1, dim=-1)
    assert torch.equal(top.indices[:, :k].sort(-1).values, out[2].sort(-1).values)
    return (top.values[:, k - 1] - top.values[:, k]).float()


mf.ROUTER_CHOICE_GAPS["Gemma4TextRouter"] = router_choice_gaps
# The routing gap a bf16 run is compared past: transformers run in bf16 moves the first MoE
# layer's router log-probabilities by up to 0.087 on gemma4_moe's golden forwards (its router is
# peaked, ROUTER_STD), far past make_fixtures.py's ROUTE_MARGIN.
BF16_ROUTE_MARGIN = 0.1
GOLDEN_EXTRA = {"gemma4_moe": lambda *a: mf.route_exact_positions(*a, margin=BF16_ROUTE_MARGIN)}


def accept_gemma4_moe(model, prompts, greedys) -> bool:
    m = router_margin(model, prompts, greedys)
    print(f"  gemma4_moe: router margin {m:.4f}")
    return m >= ROUTER_MARGIN


def perturb_gemma4(model: torch.nn.Module, family: str, seed: int) -> None:
    """The shared perturbation, then post-branch norm gains times POST_NORM_GAIN, q and k norm
    gains times QK_NORM_GAIN (attention's
    scale is 1: unit-RMS heads of 32 would give near one-hot softmaxes whose rounding an f32
    reimplementation cannot follow to 1e-4), and each layer's `layer_scalar` buffer in
    [0.5, 1.5)."""
    mf.perturb(model, family, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.mul_(QK_NORM_GAIN)
            elif name.endswith(("post_attention_layernorm.weight", "post_feedforward_layernorm.weight")):
                p.mul_(POST_NORM_GAIN)
            elif name.endswith("router.proj.weight"):
                p.copy_((ROUTER_STD * torch.randn(p.shape, generator=g)).to(p.dtype))
            elif name.endswith(("router.scale", "router.per_expert_scale")):
                p.copy_((1.0 + 0.3 * torch.randn(p.shape, generator=g)).to(p.dtype))
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("layer_scalar"):
                buf.copy_((0.5 + torch.rand(buf.shape, generator=g)).to(buf.dtype))


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "gemma4": (make_gemma4, 9000, True),
    "gemma4_kvshare": (make_gemma4_kvshare, 9500, True),
    "gemma4_wide": (make_gemma4_wide, 9600, True),
    "gemma4_moe": (make_gemma4_moe, 9700, True),
}

WEIGHT_STD = {
    #          embed, lm_head, router, in-proj, out-proj
    "gemma4": (0.3, None, 0.3, 0.2, 0.15),
    "gemma4_kvshare": (0.3, None, 0.3, 0.2, 0.15),
    "gemma4_wide": (0.3, None, 0.3, 0.2, 0.15),
    "gemma4_moe": (0.3, None, 0.3, 0.2, 0.15),
}

PERTURB = {
    "gemma4": perturb_gemma4,
    "gemma4_kvshare": perturb_gemma4,
    "gemma4_wide": perturb_gemma4,
    "gemma4_moe": perturb_gemma4,
}
ACCEPT = {"gemma4_moe": accept_gemma4_moe}
