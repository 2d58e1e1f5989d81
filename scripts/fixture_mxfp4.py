"""MXFP4 fixture: the gpt_oss fixture with its experts quantized as the gpt-oss release stores
them (`quantization_config` `quant_method: mxfp4`).

Each expert matrix is taken output-major (`gate_up_proj` `[experts, 2 inter, hidden]`, gate and
up rows interleaved; `down_proj` `[experts, hidden, inter]`) and cut along its input into blocks
of 32 values, each block one E8M0 scale (`2^(s - 127)`, the smallest power of two that brings the
block's largest magnitude within FP4's 6) and 32 FP4 E2M1 codes (the nearest of 0, 0.5, 1, 1.5,
2, 3, 4, 6 with a sign bit), two to a byte, the even value in the low nibble:
`experts.gate_up_proj_blocks` `[experts, 2 inter, hidden / 32, 16]` and `_scales` `[experts,
2 inter, hidden / 32]`, `experts.down_proj_blocks` / `_scales` likewise. Everything else is the
source's. `dequantized/` holds the same model with the experts as transformers' own
`convert_moe_packed_tensors` dequantizes them (float32), and golden.safetensors / golden.json are
computed from it by transformers in float32 on the source's prompts.

golden.json also records `route_exact_positions` (make_fixtures.py's, with the gpt_oss fixture's
margin of 0.03 between the k-th and (k+1)-th router logit, over the dequantized model's
forwards): the positions a bf16 backend is compared on.

Called by make_fixtures.py (`--families gpt_oss_mxfp4`), or alone:
    python3 scripts/fixture_mxfp4.py [--out tests/fixtures] [--route-only] [NAME ...]
(`--route-only`: only recomputes `route_exact_positions` of the fixtures already written)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.integrations.mxfp4 import FP4_VALUES, convert_moe_packed_tensors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixture_fp8 import golden_of  # noqa: E402

MXFP4_FIXTURES = {"gpt_oss_mxfp4": "gpt_oss"}
MAGNITUDES = torch.tensor(FP4_VALUES[:8])


def quantize(w: torch.Tensor):
    """`w` `[..., rows, cols]` (cols a multiple of 32) as MXFP4 blocks and scales."""
    *lead, rows, cols = w.shape
    x = w.float().reshape(*lead, rows, cols // 32, 32)
    amax = x.abs().amax(-1).clamp(min=2.0**-126)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = x / torch.pow(2.0, exp).unsqueeze(-1)
    mag = (scaled.abs().unsqueeze(-1) - MAGNITUDES).abs().argmin(-1)
    codes = (mag | ((scaled < 0) & (mag > 0)).to(torch.int64) << 3).to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks.contiguous(), (exp + 127).to(torch.uint8).contiguous()


def build(name: str, out_root: Path) -> None:
    source = MXFP4_FIXTURES[name]
    src, out = out_root / source, out_root / name
    if out.exists():
        shutil.rmtree(out)
    (out / "dequantized").mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    q, deq = {}, {}
    for k, w in load_file(src / "model.safetensors").items():
        if not (k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj")):
            q[k], deq[k] = w, w.float()
            continue
        # Stored input-first ([experts, in, out]); quantized output-major, as the release.
        blocks, scales = quantize(w.transpose(1, 2))
        q[k + "_blocks"], q[k + "_scales"] = blocks, scales
        deq[k] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).contiguous()
        assert deq[k].shape == w.shape, (k, deq[k].shape, w.shape)
    save_file(q, str(out / "model.safetensors"), metadata={"format": "pt"})
    save_file(deq, str(out / "dequantized" / "model.safetensors"), metadata={"format": "pt"})
    (out / "dequantized" / "config.json").write_text(json.dumps({**cfg, "dtype": "float32"}, indent=2) + "\n")
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in ["generation_config.json", "tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(src / f, out / f)
    source_golden = json.loads((src / "golden.json").read_text())
    tensors, greedys, margin = golden_of(out / "dequantized", source_golden["prompts"])
    save_file(tensors, str(out / "golden.safetensors"), metadata={"format": "pt"})
    golden = {
        "family": name,
        "quantized_from": source,
        "golden_dtype": "float32",
        "golden_from": "dequantized/ (transformers' convert_moe_packed_tensors in float32)",
        "tokenizer_len": source_golden["tokenizer_len"],
        "tokenizer_adds_bos": source_golden["tokenizer_adds_bos"],
        "prompts": source_golden["prompts"],
        "greedy": greedys,
        "greedy_min_top2_margin": round(margin, 4),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "encode": source_golden["encode"],
    }
    (out / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    print(f"{name}: from {source}, min greedy margin {margin:.4f}")


# The k-th vs (k+1)-th router logit gap a bf16 run is compared past (the gpt_oss fixture's).
ROUTE_BF16_MARGIN = 0.03


@torch.no_grad()
def route_exact(out: Path, golden: dict) -> list[int]:
    """Per prompt, the leading positions of prompt + greedy continuation whose every router's
    top-k choice clears ROUTE_BF16_MARGIN in the dequantized model's float32 forward."""
    model = transformers.AutoModelForCausalLM.from_pretrained(out / "dequantized", dtype=torch.float32).eval()
    gaps = []

    def hook(mod, _inp, res):
        top = res[0].float().topk(mod.top_k + 1, dim=-1)
        assert torch.equal(top.indices[:, : mod.top_k].sort(-1).values, res[2].sort(-1).values)
        gaps.append(top.values[:, mod.top_k - 1] - top.values[:, mod.top_k])

    routers = [m for m in model.modules() if type(m).__name__ == "GptOssTopKRouter"]
    assert routers
    handles = [m.register_forward_hook(hook) for m in routers]
    exact = []
    try:
        for p, g in zip(golden["prompts"], golden["greedy"]):
            gaps.clear()
            model(input_ids=torch.tensor([p["ids"] + g[:-1]]), use_cache=False)
            ok = torch.stack(gaps).min(0).values >= ROUTE_BF16_MARGIN
            exact.append(int(ok.long().cumprod(0).sum()))
    finally:
        for h in handles:
            h.remove()
    return exact


def add_route_exact(name: str, out_root: Path) -> None:
    """Writes `route_exact_positions` and `route_margin` into fixture `name`'s golden.json."""
    out = out_root / name
    golden = json.loads((out / "golden.json").read_text())
    golden["route_exact_positions"] = route_exact(out, golden)
    golden["route_margin"] = ROUTE_BF16_MARGIN
    (out / "golden.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    lengths = [len(p["ids"]) for p in golden["prompts"]]
    print(f"{name}: route_exact_positions {golden['route_exact_positions']} (prompt lengths {lengths})")


def main(names: list[str] | None, out_root: Path, route_only: bool = False) -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names or list(MXFP4_FIXTURES):
        if not route_only:
            build(name, out_root)
        add_route_exact(name, out_root)


if __name__ == "__main__":
    args = sys.argv[1:]
    root = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    if args[:1] == ["--out"]:
        root, args = Path(args[1]), args[2:]
    only = "--route-only" in args
    args = [a for a in args if a != "--route-only"]
    main(args or None, root, only)
