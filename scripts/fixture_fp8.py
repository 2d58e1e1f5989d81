"""FP8 fixtures: existing tiny fixtures with their projection weights quantized to FP8 E4M3.

Each one is written beside its source fixture (tests/fixtures/<source>/ must exist) as
`tests/fixtures/<name>/`: the FP8 checkpoint (config.json with a `quantization_config`,
model.safetensors holding F8_E4M3 weights and their scales), the source's tokenizer and
generation files, `dequantized/` (the same checkpoint with every FP8 weight replaced by code *
scale in float32, no quantization_config), and golden.safetensors / golden.json computed by
transformers in float32 from `dequantized/` on the source's prompts. Also `codes.safetensors`
in the first fixture: all 256 E4M3 codes and torch's float32 values of them.

transformers is given the dequantized weights rather than the FP8 checkpoint: on a CPU it
dequantizes FP8 to bfloat16 (rounding each code * scale), and its dequantization derives the
block from the scale grid (rows // grid rows), which misreads partial edge blocks.

Called by make_fixtures.py (`--families qwen3_fp8 ...`), or alone:
    python3 scripts/fixture_fp8.py [--out tests/fixtures] [NAME ...]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

FP8 = torch.float8_e4m3fn
E4M3_MAX = 448.0
N_GREEDY = 16

# name: (source fixture, scale layout, block or None[, which weights: "proj" (default) or "linear"])
FP8_FIXTURES = {
    # Qwen3-FP8's layout with [48, 48] blocks: 64- and 128-wide weights end in partial blocks.
    "qwen3_fp8": ("qwen3", "block", [48, 48]),
    # experts [32, 64] / [64, 32] in [48, 48] blocks; the router stays as stored (f16).
    "qwen3_moe_fp8": ("qwen3_moe", "block", [48, 48]),
    # compressed-tensors float8, one bf16 scale per output channel.
    "qwen3_ct_fp8": ("qwen3", "channel", None),
    # GLM-4.5-FP8's layout: attention (with its biases kept), the dense first layer, routed and
    # shared experts in FP8; the sigmoid router and its correction bias as stored.
    "glm4_moe_fp8": ("glm4_moe", "block", [48, 48], "linear"),
    # MiniMax-M2's release layout: experts `w1` / `w2` / `w3` in FP8.
    "minimax_m2_fp8": ("minimax_m2", "block", [48, 48], "linear"),
    # DeepSeek-V3's release layout: every linear of the decoder layers in FP8, MLA's `q_a_proj`,
    # `q_b_proj`, `kv_a_proj_with_mqa` and `kv_b_proj` included; [32, 48] blocks, so the rows
    # MLA splits (q_b's per-head nope / rope rows, kv_a's latent / rope rows) cross blocks.
    "deepseek_v3_fp8": ("deepseek_v3", "block", [32, 48], "linear"),
    # DeepSeek-V3.2: MLA as above and the lightning indexer's `wq_b`, `wk` and `weights_proj` in
    # FP8 (a release may keep `weights_proj` as stored: either loads).
    "deepseek_v32_fp8": ("deepseek_v32", "block", [32, 48], "linear"),
}


def quantized(name: str, w: torch.Tensor, which: str = "proj") -> bool:
    """The weights an FP8 release stores in FP8: decoder projections ("proj": names ending in
    `_proj.weight`; "linear": every 2-D weight of a decoder layer), never the router (`gate`),
    embeddings, norms or the head."""
    if which == "linear":
        return ".layers." in name and w.dim() == 2 and not name.endswith(".gate.weight")
    return ".layers." in name and name.endswith("_proj.weight")


def quantize_blocks(w: torch.Tensor, block: list[int]):
    """Codes and f32 scales (one per block, amax / 448, edge blocks partial), and the dequantized
    f32 weight (code * scale)."""
    rows, cols = w.shape
    br, bc = block
    gr, gc = -(-rows // br), -(-cols // bc)
    w = w.float()
    codes = torch.empty(rows, cols, dtype=FP8)
    scales = torch.empty(gr, gc, dtype=torch.float32)
    deq = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(gr):
        for j in range(gc):
            blk = w[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            s = max(float(blk.abs().max()), 1e-12) / E4M3_MAX
            scales[i, j] = s
            s = scales[i, j]
            q = (blk / s).to(FP8)
            codes[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = q
            deq[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = q.float() * s
    return codes, scales, deq


def quantize_channels(w: torch.Tensor):
    """Codes, bf16 scales `[rows, 1]` (amax / 448 per row) and the dequantized f32 weight."""
    w = w.float()
    scales = (w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / E4M3_MAX).to(torch.bfloat16)
    codes = (w / scales.float()).to(FP8)
    return codes, scales, codes.float() * scales.float()


def quant_config(layout: str, block, source_cfg: dict, router: str | None) -> dict:
    if layout == "block":
        ignore = ["lm_head"] + ([router] if router and "num_experts_per_tok" in source_cfg else [])
        return {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": block,
            "modules_to_not_convert": ignore,
        }
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "input_activations": None,
                "output_activations": None,
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True, "dynamic": False},
            }
        },
    }


@torch.no_grad()
def golden_of(model_dir: Path, prompts):
    """Logits of every prompt position and greedy continuations, transformers in float32."""
    ref = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    tensors, greedys, margin = {}, [], float("inf")
    for i, p in enumerate(prompts):
        tensors[f"logits_{i}"] = ref(input_ids=torch.tensor([p["ids"]]), use_cache=False).logits[0].float().contiguous()
        seq, out = list(p["ids"]), []
        for _ in range(N_GREEDY):
            top2 = torch.topk(ref(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float(), 2)
            margin = min(margin, float(top2.values[0] - top2.values[1]))
            out.append(int(top2.indices[0]))
            seq.append(out[-1])
        greedys.append(out)
        tensors[f"greedy_{i}"] = torch.tensor(out, dtype=torch.int64)
    return tensors, greedys, margin


def build(name: str, out_root: Path) -> None:
    source, layout, block, *which = FP8_FIXTURES[name]
    src, out = out_root / source, out_root / name
    if out.exists():
        shutil.rmtree(out)
    (out / "dequantized").mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    fp8, deq = {}, {}
    for k, w in load_file(src / "model.safetensors").items():
        if not quantized(k, w, *which):
            fp8[k], deq[k] = w, w.float()
            continue
        codes, scales, d = quantize_blocks(w, block) if layout == "block" else quantize_channels(w)
        fp8[k] = codes
        fp8[k + ("_scale_inv" if layout == "block" else "_scale")] = scales
        deq[k] = d
    save_file(fp8, str(out / "model.safetensors"), metadata={"format": "pt"})
    save_file(deq, str(out / "dequantized" / "model.safetensors"), metadata={"format": "pt"})
    (out / "dequantized" / "config.json").write_text(json.dumps({**cfg, "dtype": "float32"}, indent=2) + "\n")
    # The router's module path within a layer (`mlp.gate`, `block_sparse_moe.gate`).
    routers = [k.split(".layers.")[1].split(".", 1)[1][: -len(".weight")] for k in fp8 if k.endswith(".gate.weight")]
    cfg["quantization_config"] = quant_config(layout, block, cfg, routers[0] if routers else None)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for f in ["generation_config.json", "tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(src / f, out / f)

    source_golden = json.loads((src / "golden.json").read_text())
    tensors, greedys, margin = golden_of(out / "dequantized", source_golden["prompts"])
    save_file(tensors, str(out / "golden.safetensors"), metadata={"format": "pt"})
    golden = {
        "family": name,
        "quantized_from": source,
        "fp8_layout": layout,
        **({"weight_block_size": block} if block else {}),
        "golden_dtype": "float32",
        "golden_from": "dequantized/ (code * scale in float32)",
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
    print(f"{name}: from {source}, {layout} {block or ''}, min greedy margin {margin:.4f}")


def write_codes(out: Path) -> None:
    """All 256 E4M3 codes and torch's float32 values of them (NaN for 0x7F and 0xFF)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(FP8)
    save_file({"codes": codes, "values": codes.float()}, str(out / "codes.safetensors"), metadata={"format": "pt"})


def main(names: list[str] | None, out_root: Path) -> None:
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in names or list(FP8_FIXTURES):
        build(name, out_root)
    write_codes(out_root / next(iter(FP8_FIXTURES)))


if __name__ == "__main__":
    args = sys.argv[1:]
    root = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
    if args[:1] == ["--out"]:
        root, args = Path(args[1]), args[2:]
    main(args or None, root)
