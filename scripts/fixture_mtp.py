"""MTP fixtures: existing tiny fixtures with one multi-token-prediction layer appended.

Each one is written beside its source fixture (tests/fixtures/<source>/ must exist) as
`tests/fixtures/<name>/`: the source's files with the MTP layer announced in config.json and its
tensors added to model.safetensors as the releases store them, in one of two layouts:
- NextN (DeepSeek V3, GLM-4.5; `num_nextn_predict_layers` 1): under
  `model.layers.{num_hidden_layers}.`, `enorm`, `hnorm`, `eh_proj` (hidden x 2 * hidden),
  `shared_head.norm`, optionally `embed_tokens` and `shared_head.head`, and the layer's own
  tensors;
- Qwen (Qwen3.5, Qwen3-Next; `mtp_num_hidden_layers` 1, `mtp_use_dedicated_embeddings` false):
  `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.fc`, `mtp.norm` and the layer under
  `mtp.layers.0.`.
The layer is the family's decoder layer class as a full-attention layer (NextN: built at index
num_hidden_layers, so its MLP is the routed experts; Qwen: at index 0, as vLLM builds it, so its
MLP is what layer 0's is), random, seeded, rounded to bfloat16 like the rest. The target's golden
files are the source's (the decoder is unchanged; transformers reads no MTP layer).

transformers runs no MTP head, so `mtp_golden.safetensors` is computed here from transformers'
own modules in float32, as vLLM's and SGLang's MTP modules compute it: for each golden prompt of
n >= 2 tokens, the target's final hidden states after its final norm (`model.model(...)
.last_hidden_state`) at positions 0..n-2 and the embeddings of tokens 1..n-1, each normed by the
family's RMSNorm class (`hnorm` / `pre_fc_norm_hidden`, `enorm` / `pre_fc_norm_embedding`),
concatenated (embedding first), projected (`eh_proj` / `fc`), run through the layer at positions
0..n-2 under a causal mask, then normed (`shared_head.norm` / `mtp.norm`) and multiplied by the
head (`shared_head.head`, else the target's `lm_head`): `mtp_logits_{i}` is `[n - 1, vocab]`. No
position is masked (vLLM zeroes the DeepSeek embedding at position 0; SGLang does not).

Step (step3p7_mtp) is built and run by transformers' own MtpModel (`generate(use_mtp=True)`'s
module; build_step): the source already carries an MTP layer at `model.layers.4.`, replaced by
MtpModel's randomised layer under the released names; `mtp_logits_{i}` is its `forward_layer`
then `_project_to_logits`: the output after `shared_head.norm` (its `post_norm`) times the
target's `lm_head`, the layer with the clamps the config lists for decoder layer 0. The written
checkpoint is loaded back through `MtpModel.from_pretrained` and must give the same logits.

Seeds are accepted only when every router call of those forwards separates its choices by
ROUTER_MARGIN, so an f32 implementation routes as transformers does (and, for Step, both
clamps bite).

Called by make_fixtures.py (`--families glm4_moe_mtp deepseek_v3_mtp glm_moe_dsa_mtp qwen3_next_mtp
qwen3_5_mtp step3p7_mtp`),
or alone:
    python3 scripts/fixture_mtp.py [--out tests/fixtures] [NAME ...]
"""

from __future__ import annotations

import copy
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Step3p7ForConditionalGeneration
from transformers.modeling_layers import MtpModel

ROUTER_MARGIN = 0.002

# name: (source fixture, layout, whether the layer carries its own embed_tokens and
# shared_head.head, seed)
MTP_FIXTURES = {
    # GLM-4.5's layout: the head and embedding are the target's.
    "glm4_moe_mtp": ("glm4_moe", "nextn", False, 9101),
    # DeepSeek V3's layout: the layer carries its own embed_tokens and shared_head.head (here
    # perturbed copies of the target's, so reading the wrong table shows).
    "deepseek_v3_mtp": ("deepseek_v3", "nextn", True, 9202),
    # GLM-5's layout: the layer's sparse attention carries its own lightning indexer.
    "glm_moe_dsa_mtp": ("glm_moe_dsa", "nextn", False, 9505),
    # Qwen3-Next's `mtp.*` (its layer 0 is dense, so the MTP layer is too).
    "qwen3_next_mtp": ("qwen3_next", "qwen", False, 9303),
    # Qwen3.5's `mtp.*`.
    "qwen3_5_mtp": ("qwen3_5", "qwen", False, 9404),
    # Step 3.5 / 3.7's `model.layers.{num_hidden_layers}.` (the source already carries a random
    # one there, replaced): built and run by transformers' own MtpModel (scripts/fixture_mtp.py
    # build_step).
    "step3p7_mtp": ("step3p7", "step", False, 9505),
}

# The head's own tensors per layout: (embedding norm, hidden norm, projection, output norm).
HEAD_NAMES = {
    "nextn": ("enorm", "hnorm", "eh_proj", "shared_head.norm"),
    "qwen": ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
    "step": ("enorm", "hnorm", "eh_proj", "shared_head.norm"),
}

# Step: the clamp step3p7_mtp's config gives decoder layer 0's routed experts (`swiglu_limits[0]`;
# layer 0 is dense, so the target is unchanged), which transformers' MTP layer 0 reads, as it
# reads `swiglu_limits_shared[0]` (0.8 in the source) for its shared expert.
STEP_EXPERT_CLAMP = 0.8


def decoder_layer_class(model):
    return type(model.model.layers[-1])


def layer_config(cfg, layout: str):
    """The config and index the MTP layer is built with: NextN at index num_hidden_layers (the
    per-layer lists, GLM-5's `indexer_types` and `mlp_layer_types`, extended by a full indexer
    and a sparse MLP for it); Qwen at index 0 with layer 0 made a full-attention layer."""
    if layout == "nextn":
        c = copy.deepcopy(cfg)
        for key, kind in [("indexer_types", "full"), ("mlp_layer_types", "sparse")]:
            if isinstance(getattr(c, key, None), list):
                setattr(c, key, list(getattr(c, key)) + [kind])
        return c, cfg.num_hidden_layers
    c = copy.deepcopy(cfg)
    c.layer_types = ["full_attention"] + list(c.layer_types[1:])
    return c, 0


def random_layer(model, cfg, layout: str, center: float, seed: int):
    """The MTP layer (layer_config), weights drawn as: matrices N(0, 0.05^2), norms
    center + N(0, 0.1^2) (center 0 for the zero-centred `(1 + w)` norms), the router's bias
    N(0, 0.15^2); rounded to bfloat16."""
    g = torch.Generator().manual_seed(seed)
    c, idx = layer_config(cfg, layout)
    layer = decoder_layer_class(model)(c, layer_idx=idx).float().eval()
    with torch.no_grad():
        for name, p in sorted(layer.named_parameters(), key=lambda kv: kv[0]):
            if p.dim() == 1:
                v = center + 0.1 * torch.randn(p.shape, generator=g)
            else:
                v = 0.05 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(torch.bfloat16).float())
        for name, b in sorted(layer.named_buffers(), key=lambda kv: kv[0]):
            if name.endswith("e_score_correction_bias"):
                b.copy_((0.15 * torch.randn(b.shape, generator=g)).to(torch.bfloat16).float())
    return layer


def bf16_rand(shape, g, std: float, mean: float = 0.0) -> torch.Tensor:
    return (mean + std * torch.randn(shape, generator=g)).to(torch.bfloat16)


def checkpoint_names(layer) -> dict:
    """The layer's tensors under the names checkpoints store: transformers keeps the experts
    fused (`experts.gate_up_proj` [E, 2 * I, H], gate rows first; `experts.down_proj`
    [E, H, I]) and saves them one per expert."""
    out = {}
    for k, v in layer.state_dict().items():
        if k.endswith("inv_freq"):
            continue
        if k.endswith("experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            for e, w in enumerate(v):
                gate, up = w.chunk(2, dim=0)
                out[f"{base}{e}.gate_proj.weight"], out[f"{base}{e}.up_proj.weight"] = gate, up
        elif k.endswith("experts.down_proj"):
            base = k[: -len("down_proj")]
            for e, w in enumerate(v):
                out[f"{base}{e}.down_proj.weight"] = w
        else:
            out[k] = v
    return out


@torch.no_grad()
def mtp_forward(model, layer, parts, names, ids: list[int], margins: list[float]):
    """The MTP logits `[n - 1, vocab]` of prompt `ids` (module docstring); a prompt of one token has none."""
    f = {k: v.float() for k, v in parts.items()}
    x = torch.tensor([ids])
    hidden = model.model(input_ids=x, use_cache=False).last_hidden_state[0, :-1]
    table = f.get("embed_tokens.weight", model.model.embed_tokens.weight.float())
    emb = table[x[0, 1:]]

    def norm(v, name):
        m = type(model.model.norm)(v.shape[-1], eps=model.config.rms_norm_eps).float()
        m.weight.data.copy_(f[name + ".weight"])
        return m(v)

    e_norm, h_norm, proj, out_norm = names
    h = torch.cat([norm(emb, e_norm), norm(hidden, h_norm)], dim=-1) @ f[proj + ".weight"].T
    n = h.shape[0]
    pos = torch.arange(n)[None]
    rope_pos = pos[None].expand(3, 1, -1) if "qwen3_5" in model.config.model_type else pos
    cos_sin = model.model.rotary_emb(h[None], rope_pos)
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]

    def hook(mod, _inp, out):
        # As scripts/fixture_families/glm4_moe.py's router_margin: the group choice and the
        # k-th against the (k+1)-th biased score among the kept groups.
        scores = out[0].float().sigmoid() + mod.e_score_correction_bias.float()
        ng, tg, k = mod.num_group, mod.topk_group, mod.top_k
        grouped = scores.view(-1, ng, scores.shape[-1] // ng)
        gs = grouped.topk(2, dim=-1).values.sum(-1)
        top_g = gs.topk(min(tg + 1, ng), dim=-1)
        if tg < ng:
            margins.append(float((top_g.values[:, tg - 1] - top_g.values[:, tg]).min()))
        keep = torch.zeros_like(gs).scatter_(1, top_g.indices[:, :tg], 1.0).bool()
        kept = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(scores.shape)
        top = kept.topk(k + 1, dim=-1).values
        margins.append(float((top[:, k - 1] - top[:, k]).min()))

    routers = [m for m in layer.modules() if type(m).__name__.endswith("TopkRouter")]
    handles = [m.register_forward_hook(hook) for m in routers]
    out = layer(h[None], attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
    for hd in handles:
        hd.remove()
    out = out[0] if isinstance(out, tuple) else out
    head = f.get("shared_head.head.weight", model.lm_head.weight.float())
    return norm(out[0], out_norm) @ head.T


def build(name: str, out_root: Path) -> None:
    source, layout, own_tables, seed = MTP_FIXTURES[name]
    if layout == "step":
        build_step(name, out_root)
        return
    src, out = out_root / source, out_root / name
    cfg_json = json.loads((src / "config.json").read_text())
    golden = json.loads((src / "golden.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(
        src, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    cfg = model.config
    hidden = cfg.hidden_size
    names = HEAD_NAMES[layout]
    # Zero-centred `(1 + w)` norms (Qwen) are drawn around 0, the others around 1.
    center = 0.0 if layout == "qwen" else 1.0
    for attempt in range(50):
        s = seed + 1000 * attempt
        g = torch.Generator().manual_seed(s)
        layer = random_layer(model, cfg, layout, center, s)
        e_norm, h_norm, proj, out_norm = names
        parts = {
            e_norm + ".weight": bf16_rand([hidden], g, 0.1, center),
            h_norm + ".weight": bf16_rand([hidden], g, 0.1, center),
            proj + ".weight": bf16_rand([hidden, 2 * hidden], g, 0.05),
            out_norm + ".weight": bf16_rand([hidden], g, 0.1, center),
        }
        if own_tables:
            emb, head = model.model.embed_tokens.weight, model.lm_head.weight
            parts["embed_tokens.weight"] = (emb + bf16_rand(emb.shape, g, 0.01).float()).to(torch.bfloat16)
            parts["shared_head.head.weight"] = (head + bf16_rand(head.shape, g, 0.01).float()).to(torch.bfloat16)
        margins: list[float] = []
        logits = {
            f"mtp_logits_{i}": mtp_forward(model, layer, parts, names, pr["ids"], margins).contiguous()
            for i, pr in enumerate(golden["prompts"])
            if len(pr["ids"]) >= 2
        }
        if min(margins, default=1.0) >= ROUTER_MARGIN:
            break
    else:
        raise SystemExit(f"{name}: no seed separates the MTP layer's router choices by {ROUTER_MARGIN}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if layout == "nextn":
        head_prefix = layer_prefix = f"model.layers.{cfg.num_hidden_layers}."
        announce = {"num_nextn_predict_layers": 1}
    else:
        head_prefix, layer_prefix = "mtp.", "mtp.layers.0."
        announce = {"mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False}
    tensors = dict(load_file(src / "model.safetensors"))
    tensors.update({head_prefix + k: v.to(torch.bfloat16).contiguous() for k, v in parts.items()})
    tensors.update({layer_prefix + k: v.to(torch.bfloat16).contiguous() for k, v in checkpoint_names(layer).items()})
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps({**cfg_json, **announce}, indent=2) + "\n")
    for f in ["generation_config.json", "tokenizer.json", "tokenizer_config.json", "golden.json", "golden.safetensors"]:
        shutil.copy(src / f, out / f)
    save_file(logits, str(out / "mtp_golden.safetensors"), metadata={"format": "pt"})
    for f in out.iterdir():
        f.chmod(0o644)
    margin = f", min router margin {min(margins):.4f}" if margins else ""
    print(f"{name}: from {source}, {layout}, seed {s}, own tables {own_tables}{margin}")

# Step's checkpoint names for transformers' MTP layer tensors (`layers.0.*` of MtpModel), as
# scripts/fixture_families/step3p7.py's check_saved_step3p7 reads them back.
STEP_RENAMES = [
    ("post_norm.", "shared_head.norm."),
    ("mtp_block.mlp.gate.e_score_correction_bias", "moe.router_bias"),
    ("mtp_block.mlp.gate.", "moe.gate."),
    ("mtp_block.mlp.shared_experts.", "share_expert."),
    ("mtp_block.", ""),
]


def step_checkpoint_names(layer, prefix: str) -> dict:
    """The MtpLayer's tensors under the released names: stacked experts `moe.{gate,up}_proj`
    [E, I, H] (transformers fuses them as `gate_up_proj` [E, 2I, H], gate rows first) and
    `moe.down_proj` [E, H, I]."""
    out = {}
    for k, v in layer.state_dict().items():
        if k.endswith("experts.gate_up_proj"):
            gate, up = v.chunk(2, dim=1)
            out[prefix + "moe.gate_proj.weight"], out[prefix + "moe.up_proj.weight"] = gate, up
            continue
        if k.endswith("experts.down_proj"):
            out[prefix + "moe.down_proj.weight"] = v
            continue
        for old, new in STEP_RENAMES:
            if k.startswith(old):
                k = new + k[len(old):]
                break
        out[prefix + k] = v
    return out


@torch.no_grad()
def step_logits(model, mtp, ids: list[int], margins: list[float], hits: dict):
    """MtpModel's depth-0 logits `[n - 1, vocab]` of prompt `ids`: `forward_layer` over the
    target's final hidden rows 0..n-2 and tokens 1..n-1 at positions 0..n-2 (generate() gives
    them positions 1..n-1; rope is relative, the result the same), then `_project_to_logits`.
    Records the router's choice margins and how many gate / up values pass each clamp."""
    x = torch.tensor([ids])
    hidden = model.model(input_ids=x, use_cache=False).last_hidden_state[:, :-1]
    block = mtp.layers[0].mtp_block

    def router(mod, _inp, out):
        scores = out[0].float().sigmoid() + mod.e_score_correction_bias.float()
        top = scores.topk(mod.top_k + 1, dim=-1).values
        margins.append(float((top[:, mod.top_k - 1] - top[:, mod.top_k]).min()))

    def clamp(name, limit, gate_up):
        def fn(mod, inp, _out):
            ws = [w for w in mod.gate_up_proj] if gate_up else [torch.cat([mod.gate_proj.weight, mod.up_proj.weight])]
            for w in ws:
                g, u = torch.nn.functional.linear(inp[0], w).chunk(2, dim=-1)
                n = int((torch.nn.functional.silu(g) > limit).sum() + (u.abs() > limit).sum())
                hits[name] = hits.get(name, 0) + n
        return fn

    mlp = block.mlp
    handles = [
        mlp.gate.register_forward_hook(router),
        mlp.experts.register_forward_hook(clamp("experts", mlp.experts.limit, True)),
        mlp.shared_experts.register_forward_hook(clamp("shared", mlp.shared_experts.limit, False)),
    ]
    try:
        pos = torch.arange(len(ids) - 1)[None]
        out = mtp.forward_layer(0, hidden, pos, None, input_ids=x[:, 1:])
    finally:
        for h in handles:
            h.remove()
    return mtp._project_to_logits(out)[0]


def build_step(name: str, out_root: Path) -> None:
    """step3p7_mtp: transformers' MtpModel over the step3p7 target (its config's
    `swiglu_limits[0]` set to STEP_EXPERT_CLAMP), its layer drawn as random_layer draws (norms
    around 0: `(1 + w)` norms), the golden from `forward_layer`; then the written checkpoint is
    loaded back through `MtpModel.from_pretrained` and must give the same logits."""
    source, _, _, seed = MTP_FIXTURES[name]
    src, out = out_root / source, out_root / name
    cfg_json = json.loads((src / "config.json").read_text())
    golden = json.loads((src / "golden.json").read_text())
    load = dict(dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    model = Step3p7ForConditionalGeneration.from_pretrained(src, **load).eval()
    tc = model.config.get_text_config()
    tc.swiglu_limits = [STEP_EXPERT_CLAMP] + list(tc.swiglu_limits[1:])
    n = tc.num_hidden_layers
    assert tc.num_nextn_predict_layers == 1 and tc.mtp_layer_types == ["full_attention"]
    assert tc.mtp_mlp_layer_types == ["sparse"] and tc.mlp_layer_types[0] == "dense"
    for attempt in range(50):
        s = seed + 1000 * attempt
        g = torch.Generator().manual_seed(s)
        mtp = MtpModel(model, 1).float().eval()
        layer = mtp.layers[0]
        with torch.no_grad():
            for _, p in sorted(layer.named_parameters(), key=lambda kv: kv[0]):
                std = 0.1 if p.dim() == 1 else 0.05
                p.copy_((std * torch.randn(p.shape, generator=g)).to(torch.bfloat16).float())
            for k, b in sorted(layer.named_buffers(), key=lambda kv: kv[0]):
                if k.endswith("e_score_correction_bias"):
                    b.copy_((0.15 * torch.randn(b.shape, generator=g)).to(torch.bfloat16).float())
        assert (layer.mtp_block.mlp.experts.limit, layer.mtp_block.mlp.shared_experts.limit) == (STEP_EXPERT_CLAMP, 0.8)
        margins: list[float] = []
        hits: dict = {}
        logits = {
            f"mtp_logits_{i}": step_logits(model, mtp, pr["ids"], margins, hits).contiguous()
            for i, pr in enumerate(golden["prompts"])
            if len(pr["ids"]) >= 2
        }
        if min(margins) >= ROUTER_MARGIN and all(hits.get(k, 0) > 0 for k in ["experts", "shared"]):
            break
    else:
        raise SystemExit(f"{name}: no seed separates the router's choices by {ROUTER_MARGIN} with both clamps biting")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    prefix = f"model.layers.{n}."
    tensors = {k: v for k, v in load_file(src / "model.safetensors").items() if not k.startswith(prefix)}
    tensors.update({k: v.to(torch.bfloat16).contiguous() for k, v in step_checkpoint_names(layer, prefix).items()})
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    text = cfg_json["text_config"]
    text["swiglu_limits"] = [STEP_EXPERT_CLAMP] + text["swiglu_limits"][1:]
    (out / "config.json").write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")
    for f in ["generation_config.json", "tokenizer.json", "tokenizer_config.json", "golden.json", "golden.safetensors"]:
        shutil.copy(src / f, out / f)
    save_file(logits, str(out / "mtp_golden.safetensors"), metadata={"format": "pt"})
    for f in out.iterdir():
        f.chmod(0o644)
    # transformers' own load of what was written gives the same logits.
    back = Step3p7ForConditionalGeneration.from_pretrained(out, **load).eval()
    again = MtpModel.from_pretrained(back).float().eval()
    for i, pr in enumerate(golden["prompts"]):
        if len(pr["ids"]) >= 2:
            got = step_logits(back, again, pr["ids"], [], {})
            assert torch.equal(got, logits[f"mtp_logits_{i}"]), f"{name}: prompt {i} differs once reloaded"
    print(f"{name}: from {source}, step, seed {s}, min router margin {min(margins):.4f}, clamp hits {hits}")


def main(names: list[str] | None, out_root: Path) -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names or list(MTP_FIXTURES):
        build(name, out_root)


if __name__ == "__main__":
    args = sys.argv[1:]
    root = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    if args[:1] == ["--out"]:
        root, args = Path(args[1]), args[2:]
    main(args or None, root)
