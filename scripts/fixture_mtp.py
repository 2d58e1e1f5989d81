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

Seeds are accepted only when every router call of those forwards separates its choices by
ROUTER_MARGIN, so an f32 implementation routes as transformers does.

Called by make_fixtures.py (`--families glm4_moe_mtp deepseek_v3_mtp glm_moe_dsa_mtp qwen3_next_mtp
qwen3_5_mtp`),
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
from transformers import AutoModelForCausalLM

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
}

# The head's own tensors per layout: (embedding norm, hidden norm, projection, output norm).
HEAD_NAMES = {
    "nextn": ("enorm", "hnorm", "eh_proj", "shared_head.norm"),
    "qwen": ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm"),
}


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
