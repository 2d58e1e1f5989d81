"""Step 3.5 / 3.7 fixture builder (`Step3p7ForConditionalGeneration`), merged by make_fixtures.py.

step3p7: the checkpoint as Step-3.7-Flash is released: the text decoder under `model.layers.*`
(`moe.{gate,up,down}_proj.weight` stacked experts, `moe.gate.weight`, `moe.router_bias`,
`share_expert.*`), a tiny vision tower (`vision_model.*`, `vit_large_projector.*`, unread by
TensorFold), one MTP layer after the decoder's (`model.layers.4.*`: its block, `enorm`, `hnorm`,
`eh_proj`, `shared_head.norm`; transformers ignores it on a plain load) and a `text_config` in
the released (legacy) form that transformers converts at load: `num_attention_groups`,
`moe_num_experts`, `moe_top_k`, `moe_layers_enum` "1,3,4", `attention_other_setting` (8 query heads
on sliding layers, 4 on full ones), per-layer `rope_theta` and `partial_rotary_factors` and
`layer_types` / `swiglu_limits*` padded with the MTP layer's entry, `rope_scaling` (llama3, on the
full layers only), `num_nextn_predict_layers` 1.

4 layers: sliding, full, sliding, full (`sliding_window` 4, shorter than the prompts); layers 0
and 2 dense (width 96), 1 and 3 MoE (8 experts of width 24, top 2, sigmoid scores plus a random
router bias, `moe_router_scaling_factor` 2.5, a shared expert of width 40); head_dim 16, 2 KV
heads, `query_pre_attn_scalar` 20, full layers rotate 8 of 16 dims (theta 5e4, llama3 scaling),
sliding ones all 16 (theta 1e4); clamps 0.8 on the dense MLP of layer 0, the shared expert of
layer 1 and the routed experts of layer 3 (checked to bite on the golden forwards). bf16. Weights
are accepted only when every router choice is separated by ROUTER_MARGIN, as glm4_moe.py does;
golden.json records `route_exact_positions`.
"""

from __future__ import annotations

import json

import __main__ as mf  # make_fixtures.py, which loads this module
import torch
from safetensors.torch import load_file, save_file
from transformers import Step3p7Config, Step3p7ForConditionalGeneration

VOCAB_SIZE = 512
PAD, BOS, EOS = 0, 1, 2
ROUTER_MARGIN = 0.002  # k-th vs (k+1)-th biased score
N_LAYERS = 4
CLAMP = 0.8

# The text config as released checkpoints spell it (one MTP layer's entries padded on the lists).
TEXT_CONFIG = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": N_LAYERS,
    "num_attention_heads": 4,
    "num_attention_groups": 2,
    "head_dim": 16,
    "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 8,
                                "num_attention_groups": 2, "head_dim": 16},
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                    "full_attention"],
    "sliding_window": 4,
    "rope_theta": [10000.0, 50000.0, 10000.0, 50000.0, 50000.0],
    "partial_rotary_factors": [1.0, 0.5, 1.0, 0.5, 0.5],
    "rope_scaling": {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 16},
    "query_pre_attn_scalar": 20,
    "moe_layers_enum": "1,3,4",
    "moe_num_experts": 8,
    "moe_top_k": 2,
    "moe_intermediate_size": 24,
    "share_expert_dim": 40,
    "moe_router_scaling_factor": 2.5,
    "swiglu_limits": [0, 0, 0, CLAMP, 7],
    "swiglu_limits_shared": [CLAMP, CLAMP, 0, 0, 16],
    "num_nextn_predict_layers": 1,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
}
VISION_CONFIG = {"width": 16, "layers": 1, "heads": 2, "image_size": 28, "patch_size": 14}


def make_step3p7():
    cfg = Step3p7Config(text_config=json.loads(json.dumps(TEXT_CONFIG)), vision_config=dict(VISION_CONFIG))
    tc = cfg.text_config
    # What transformers made of the released form.
    assert tc.layer_types == TEXT_CONFIG["layer_types"][:N_LAYERS] and tc.mtp_layer_types == ["full_attention"]
    assert tc.mlp_layer_types == ["dense", "sparse", "dense", "sparse"] and tc.mtp_mlp_layer_types == ["sparse"]
    assert (tc.num_key_value_heads, tc.n_routed_experts, tc.num_experts_per_tok) == (2, 8, 2)
    assert tc.num_sliding_attention_heads == 8 and tc.swiglu_limits == [0, 0, 0, CLAMP]
    return Step3p7ForConditionalGeneration, cfg, torch.bfloat16


def perturb_step3p7(model: torch.nn.Module, family: str, seed: int) -> None:
    """Seeded random weights by name: norms `0.1 r` (scaled by `1 + w`), the rest as WEIGHT_STD
    says; the routers' bias buffers N(0, 0.1^2)."""
    e_std, h_std, r_std, in_std, out_std = mf.WEIGHT_STD[family]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if "vision_model" in name or "multi_modal_projector" in name:
                v = 0.02 * r
            elif "norm" in name:
                v = 0.1 * r
            elif "embed_tokens" in name:
                v = e_std * r
            elif "lm_head" in name:
                v = h_std * r
            elif name.endswith("mlp.gate.weight"):
                v = r_std * r
            elif "o_proj" in name or "down_proj" in name:
                v = out_std * r
            else:
                v = in_std * r
            p.copy_(v.to(p.dtype))
        g = torch.Generator().manual_seed(seed + 1)
        for name, buf in sorted(model.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                buf.copy_((0.1 * torch.randn(buf.shape, generator=g)).to(buf.dtype))


def after_save_step3p7(out, model) -> None:
    """The released layout: config.json's `text_config` in the released form, and one MTP layer
    (a copy of the last layer's shapes plus `enorm`, `hnorm`, `eh_proj`, `shared_head.norm`)
    appended to model.safetensors as `model.layers.{N_LAYERS}.*`."""
    cfg = json.loads((out / "config.json").read_text())
    cfg["text_config"] = {"model_type": "step3p5", **TEXT_CONFIG}
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tensors = load_file(out / "model.safetensors")
    hidden = TEXT_CONFIG["hidden_size"]
    g = torch.Generator().manual_seed(4242)
    last = f"model.layers.{N_LAYERS - 1}."
    mtp = {k.replace(last, f"model.layers.{N_LAYERS}."): v for k, v in tensors.items() if k.startswith(last)}
    mtp.update({f"model.layers.{N_LAYERS}.{k}": torch.empty(s) for k, s in [
        ("enorm.weight", (hidden,)), ("hnorm.weight", (hidden,)), ("eh_proj.weight", (hidden, 2 * hidden)),
        ("shared_head.norm.weight", (hidden,))]})
    for k in sorted(mtp):
        mtp[k] = (0.1 * torch.randn(mtp[k].shape, generator=g)).to(torch.bfloat16)
    save_file({**tensors, **mtp}, str(out / "model.safetensors"), metadata={"format": "pt"})


def check_saved_step3p7(saved: dict, loaded: dict) -> None:
    """The f32 model's text weights are exactly the upcast saved ones under their released
    names; the vision tower and the MTP layer are in the checkpoint and not checked here."""
    used = set()

    def same(k, w, names, cat=False):
        want = torch.cat([saved[n] for n in names], 1) if cat else saved[names[0]]
        assert torch.equal(w, want.float()), k
        used.update(names)

    for k, w in loaded.items():
        if k.startswith(("model.vision_model.", "model.multi_modal_projector.")):
            continue
        name = k.replace("model.language_model.", "model.")
        if name.endswith("mlp.experts.gate_up_proj"):
            pre = name[: -len("mlp.experts.gate_up_proj")]
            same(k, w, [f"{pre}moe.gate_proj.weight", f"{pre}moe.up_proj.weight"], cat=True)
        elif name.endswith("mlp.experts.down_proj"):
            same(k, w, [name.replace("mlp.experts.down_proj", "moe.down_proj.weight")])
        elif name.endswith("mlp.gate.weight"):
            same(k, w, [name.replace("mlp.gate.weight", "moe.gate.weight")])
        elif name.endswith("mlp.gate.e_score_correction_bias"):
            same(k, w, [name.replace("mlp.gate.e_score_correction_bias", "moe.router_bias")])
        else:
            same(k, w, [name.replace("mlp.shared_experts.", "share_expert.")])
    rest = {k for k in saved if k not in used}
    assert all(k.startswith(("vision_model.", "vit_large_projector.", f"model.layers.{N_LAYERS}.")) for k in rest), rest


def _choice_gaps(mod, out) -> torch.Tensor:
    """Step's router: choice values sigmoid(logit) + bias; the k-th vs (k+1)-th per token."""
    scores = out[0].float().sigmoid() + mod.e_score_correction_bias.float()
    top = scores.topk(mod.top_k + 1, dim=-1)
    assert torch.equal(top.indices[:, : mod.top_k].sort(-1).values, out[2].sort(-1).values)
    return top.values[:, mod.top_k - 1] - top.values[:, mod.top_k]


mf.ROUTER_CHOICE_GAPS["Step3p7TopKRouter"] = _choice_gaps


@torch.no_grad()
def clamp_hits(model, prompts) -> dict:
    """How many gate and up values pass CLAMP in each clamped MLP over the prompts' forwards."""
    hits = {}

    def hook(name, gate_up):
        def fn(_mod, inp, _out):
            x = inp[0]
            if gate_up is None:
                g, u = _mod.gate_proj(x), _mod.up_proj(x)
            else:
                g, u = torch.nn.functional.linear(x, gate_up).chunk(2, dim=-1)
            hits[name] = hits.get(name, 0) + int((torch.nn.functional.silu(g) > CLAMP).sum() + (u.abs() > CLAMP).sum())
        return fn

    layers = model.model.language_model.layers
    handles = [
        layers[0].mlp.register_forward_hook(hook("dense 0", None)),
        layers[1].mlp.shared_experts.register_forward_hook(hook("shared 1", None)),
        # Every routed expert's inputs: the experts module sees all rows; count over all experts.
        layers[3].mlp.experts.register_forward_hook(
            lambda mod, inp, _o: hits.__setitem__("experts 3", hits.get("experts 3", 0) + int(sum(
                (torch.nn.functional.silu(g) > CLAMP).sum() + (u.abs() > CLAMP).sum()
                for g, u in (torch.nn.functional.linear(inp[0], w).chunk(2, dim=-1) for w in mod.gate_up_proj))))),
    ]
    try:
        for p in prompts:
            model(input_ids=torch.tensor([p["ids"]]), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return hits


def accept_step3p7(model, prompts, greedys) -> bool:
    gaps = mf.route_choice_gaps(model, prompts, greedys)
    m = min(float(g.min()) for g in gaps)
    hits = clamp_hits(model, prompts)
    print(f"  step3p7: router margin {m:.4f}, clamp hits {hits}")
    assert all(v > 0 for v in hits.values()), hits
    return m >= ROUTER_MARGIN


FAMILIES = {
    # family: (builder, seed, tokenizer adds BOS)
    "step3p7": (make_step3p7, 37000, False),
}

WEIGHT_STD = {
    #             embed, lm_head, router, in-proj, out-proj
    "step3p7": (0.5, 0.5, 0.5, 0.12, 0.12),
}

PERTURB = {"step3p7": perturb_step3p7}
ACCEPT = {"step3p7": accept_step3p7}
GOLDEN_EXTRA = {"step3p7": lambda *a: mf.route_exact_positions(*a)}
LOADER = {"step3p7": Step3p7ForConditionalGeneration}
AFTER_SAVE = {"step3p7": after_save_step3p7}
CHECK_SAVED = {"step3p7": check_saved_step3p7}
