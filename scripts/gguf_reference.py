#!/usr/bin/env python3
"""Reference outputs of transformers' own GGUF loader for gemma-3-270m-q4_k_m.gguf.

Writes tests/fixtures/gemma3_270m_gguf/reference.json (small, committed) with, per prompt:
HF token ids (add_special_tokens=True), the 32-token greedy continuation (own argmax loop,
EOS does not stop it), the top-10 (id, logit) pairs at the prompt's end (float32), plus
what the loader builds as the config (`hf_config`), the tokenizer's encoding of varied
strings (`encode`), versions and the file's sha256. With llama-cpp-python installed it
also records llama.cpp's tokenization / top-10 / greedy for the same prompts
(`llamacpp`), as a second opinion (llama.cpp quantises activations, so its logits differ).

The GGUF is dequantised to float32 by transformers (`gguf` package), so these are the
logits of the *dequantised* weights in f32 - an f32 engine that dequantises the same
blocks should match up to f32 summation-order error; one that runs quantised dot products (Q8 activations, like
llama.cpp) will differ more: see `greedy_top2_margin` before asserting a greedy token.

Usage:
  pip install gguf accelerate        # besides torch + transformers>=5
  python3 scripts/gguf_reference.py [--model PATH.gguf] [--out DIR] [--no-llamacpp]
Without --model it runs scripts/fetch_gemma3_gguf.sh (cache: ~/.cache/tensorfold/models/).
Slow on 2 cores: converting the 262k-token tokenizer and dequantising take minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "gemma3_270m_gguf"
GEN_TOKENS = 32
TOPK = 10

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time",
    "The three primary colors are",
    (
        "The old lighthouse stood at the edge of the cliff, its white paint peeling after "
        "decades of salt and wind. Every evening the keeper climbed the narrow stairs to "
        "light the lamp, and every morning he wrote the weather in a worn leather book. "
        "One winter night, a small boat appeared"
    ),
]

ENCODE_STRINGS = [
    "Hello world",
    "  two leading spaces and  double  spaces ",
    "line one\nline two\n\n\tindented with a tab",
    "Digits: 0 7 42 1234567890 3.14159 -12,345",
    "Unicode: café naïve Zürich Ελληνικά русский 日本語の文章 한국어",
    "Emoji: 😀🚀👍🏽 ❤️ 🇫🇷",
    'def add(a, b):\n    return a + b  # sum\n\nprint(add(1, 2))',
    "<bos>literal special tokens<eos> <start_of_turn>user\nhi<end_of_turn>",
    "",
    "   ",
    "https://example.com/path?q=1&x=%20 user@mail.org",
    "ALLCAPS camelCaseWord snake_case_word don't won't",
]


def log(msg: str) -> None:
    print(f"gguf_reference: {msg}", file=sys.stderr, flush=True)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_model(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    fetch = REPO / "scripts" / "fetch_gemma3_gguf.sh"
    if fetch.exists():
        try:
            out = subprocess.run(["bash", str(fetch)], check=True, capture_output=True, text=True)
            return Path(out.stdout.strip().splitlines()[-1])
        except subprocess.CalledProcessError as e:
            log(f"{fetch.name} failed ({e.returncode}): {e.stderr.strip()[-500:]}")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tensorfold" / "models"
    return cache / NAME


def jsonable(x):
    """config.to_dict() can hold torch dtypes and other objects: make it plain JSON."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def topk_pairs(logits, k=TOPK):
    import torch

    vals, idx = torch.topk(logits.float(), k)
    return [[int(i), float(v)] for i, v in zip(idx.tolist(), vals.tolist())]


def _cache_kw(model) -> str:
    """transformers 5.2x renamed `past_key_values` to `cache` (the old name warns)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(res):
    c = getattr(res, "cache", None)
    return c if c is not None else res.past_key_values


def greedy_hf(model, ids: list[int], n: int):
    """Own argmax loop with the KV cache: EOS does not stop it. Returns ids, last-prompt
    logits, and the top1-top2 gap at every step (how robust each token is)."""
    import torch

    out, margins = [], []
    with torch.no_grad():
        x = torch.tensor([ids])
        res = model(input_ids=x, use_cache=True)
        first_logits = res.logits[0, -1].float().clone()
        logits, past = first_logits, _cache_of(res)
        for step in range(n):
            top2 = torch.topk(logits, 2).values
            margins.append(float(top2[0] - top2[1]))
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            if step + 1 == n:
                break
            res = model(input_ids=torch.tensor([[nxt]]), use_cache=True, **{_cache_kw(model): past})
            logits, past = res.logits[0, -1].float(), _cache_of(res)
    return out, first_logits, margins


def greedy_hf_no_cache_check(model, ids: list[int], greedy: list[int], steps: int = 4) -> bool:
    """Re-derive the first few greedy tokens by full re-forward (no cache): same ids?"""
    import torch

    seq = list(ids)
    with torch.no_grad():
        for t in greedy[:steps]:
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            if int(torch.argmax(logits)) != t:
                return False
            seq.append(t)
    return True


def gguf_norm_offset_check(path: Path, model) -> dict:
    """Compare a few raw GGUF norm tensors with what transformers loaded."""
    import numpy as np
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    raw = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors if t.name.endswith("norm.weight")}
    sd = model.state_dict()
    pairs = {
        "output_norm.weight": "model.norm.weight",
        "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
        "blk.0.post_attention_norm.weight": "model.layers.0.post_attention_layernorm.weight",
        "blk.0.ffn_norm.weight": "model.layers.0.pre_feedforward_layernorm.weight",
        "blk.0.post_ffw_norm.weight": "model.layers.0.post_feedforward_layernorm.weight",
        "blk.0.attn_q_norm.weight": "model.layers.0.self_attn.q_norm.weight",
        "blk.0.attn_k_norm.weight": "model.layers.0.self_attn.k_norm.weight",
    }
    out = {}
    for g, h in pairs.items():
        diff = raw[g] - sd[h].float().numpy()
        out[g] = {
            "hf_name": h,
            "gguf_minus_hf_min": float(diff.min()),
            "gguf_minus_hf_max": float(diff.max()),
            "gguf_first4": [float(v) for v in raw[g][:4]],
        }
    meta = {}
    for k, f in reader.fields.items():
        if k.startswith("tokenizer.ggml.") and k.split(".")[-1] in ("tokens", "scores", "token_type", "merges"):
            meta[k] = f"<{len(f.data)} entries>"
            continue
        try:
            meta[k] = jsonable(f.contents())
        except Exception:  # noqa: BLE001 - metadata is informative only
            meta[k] = "<unreadable>"
    types: dict[str, int] = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return {"norms": out, "gguf_metadata": meta, "tensor_types": types, "tensor_count": len(reader.tensors)}


def llamacpp_logits(llm):
    """Logits of the last evaluated token (llama-cpp-python keeps no scores unless
    logits_all=True, which would cost n_ctx x 262144 floats)."""
    import llama_cpp
    import numpy as np

    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32)


def llamacpp_opinion(path: Path, prompts: list[dict], encode: list[dict]) -> dict | None:
    """llama.cpp's tokenisation, top-10 and greedy for the same prompts (second opinion)."""
    try:
        import llama_cpp
        import numpy as np
    except ImportError:
        log("llama-cpp-python not installed: skipping the llama.cpp second opinion")
        return None
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=os.cpu_count(), verbose=False, seed=0)
    res = {
        "version": llama_cpp.__version__,
        "how": "llama-cpp-python defaults (flash attention off, f16 KV cache, CPU); HF's prompt ids "
        "evaluated as one batch, then own argmax loop of single-token evals (EOS ignored)",
        "prompts": [],
        "encode_agrees": [],
        "encode_diffs": [],
    }
    for e in encode:
        ids = llm.tokenize(e["text"].encode("utf-8"), add_bos=True, special=True)
        same = ids == e["ids"]
        res["encode_agrees"].append(same)
        if not same:
            res["encode_diffs"].append({"text": e["text"], "llamacpp_ids": ids})
    for p in prompts:
        ids = llm.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)
        llm.reset()
        llm.eval(p["ids"])  # HF's ids, so the logits compare like for like
        logits = llamacpp_logits(llm)
        order = np.argsort(-logits, kind="stable")[:TOPK]
        top = [[int(i), float(logits[i])] for i in order]
        greedy = []
        cur = logits
        for step in range(GEN_TOKENS):
            t = int(np.argmax(cur))
            greedy.append(t)
            if step + 1 == GEN_TOKENS:
                break
            llm.eval([t])
            cur = llamacpp_logits(llm)
        agree = 0
        for a, b in zip(greedy, p["greedy_ids"]):
            if a != b:
                break
            agree += 1
        hf_top = dict((i, v) for i, v in p["top_logits"])
        mine = dict((i, v) for i, v in top)
        common = [i for i in mine if i in hf_top]
        res["prompts"].append(
            {
                "tokenize_agrees": ids == p["ids"],
                "top_logits": [[i, round(v, 4)] for i, v in top],
                "max_abs_diff_top_logits_vs_hf": round(max((abs(mine[i] - hf_top[i]) for i in common), default=-1.0), 4),
                "greedy_ids": greedy,
                "greedy_prefix_agreeing_with_hf": agree,
            }
        )
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="path to gemma-3-270m-q4_k_m.gguf (default: fetch / cache)")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (reference.json)")
    ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp second opinion")
    ap.add_argument(
        "--llamacpp-only", action="store_true", help="only (re)compute the `llamacpp` section of an existing reference.json"
    )
    args = ap.parse_args()
    out = Path(args.out) / "reference.json"
    if args.llamacpp_only:
        ref = json.loads(out.read_text(encoding="utf-8"))
        opinion = llamacpp_opinion(find_model(args.model), ref["prompts"], ref["encode"])
        if opinion is None:
            return 1
        ref["llamacpp"] = opinion
        write_json(out, ref)
        return 0

    import gguf
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    path = find_model(args.model)
    if not path.exists():
        log(f"model not found at {path}; run scripts/fetch_gemma3_gguf.sh")
        return 1
    sha = sha256_of(path)
    if sha != SHA256:
        log(f"warning: sha256 {sha} != expected {SHA256}")

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    log(f"tokenizer {type(tok).__name__} loaded in {time.time() - t0:.0f}s")
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    log(f"model {type(model).__name__} loaded in {time.time() - t0:.0f}s")

    prompts = []
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=True).input_ids
        t0 = time.time()
        greedy, logits, margins = greedy_hf(model, ids, GEN_TOKENS)
        log(f"prompt of {len(ids)} ids: greedy done in {time.time() - t0:.0f}s")
        prompts.append(
            {
                "text": text,
                "ids": ids,
                "top_logits": topk_pairs(logits),
                "greedy_ids": greedy,
                "greedy_text": tok.decode(greedy),
                "greedy_top2_margin": [round(m, 5) for m in margins],
                "greedy_min_top2_margin": round(min(margins), 5),
            }
        )
    cache_ok = greedy_hf_no_cache_check(model, prompts[0]["ids"], prompts[0]["greedy_ids"])
    log(f"no-cache re-forward agrees with the cached greedy: {cache_ok}")

    encode = []
    for s in ENCODE_STRINGS:
        ids = tok(s, add_special_tokens=True).input_ids
        encode.append(
            {
                "text": s,
                "ids": ids,
                "tokens": tok.convert_ids_to_tokens(ids),
                "decoded": tok.decode(ids, skip_special_tokens=False),
            }
        )

    checks = gguf_norm_offset_check(path, model)
    sd = model.state_dict()
    tied = "lm_head.weight" not in sd or sd["lm_head.weight"].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()

    ref = {
        "model_file": path.name,
        "sha256": sha,
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
            "python": sys.version.split()[0],
        },
        "how": (
            "AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=float32, "
            "attn_implementation='eager') (weights dequantised to f32 by the gguf package); "
            "tokenizer AutoTokenizer.from_pretrained(dir, gguf_file=name); ids with "
            "add_special_tokens=True; greedy = own argmax loop with KV cache, EOS ignored; "
            f"top_logits = top-{TOPK} (id, logit) at the last prompt position"
        ),
        "tokenizer": {
            "class": type(tok).__name__,
            "len": len(tok),
            "bos": [tok.bos_token, tok.bos_token_id],
            "eos": [tok.eos_token, tok.eos_token_id],
            "pad": [tok.pad_token, tok.pad_token_id],
            "unk": [tok.unk_token, tok.unk_token_id],
            "chat_template": getattr(tok, "chat_template", None),
            "adds_bos": tok("x").input_ids[:1] == [tok.bos_token_id],
        },
        "model_class": type(model).__name__,
        "tied_lm_head": bool(tied),
        "greedy_cache_vs_no_cache_agree": cache_ok,
        "gen_tokens": GEN_TOKENS,
        "prompts": prompts,
        "encode": encode,
        "hf_config": jsonable(model.config.to_dict()),
        "generation_config": jsonable(model.generation_config.to_dict()),
        "gguf_checks": checks,
    }
    if not args.no_llamacpp:
        opinion = llamacpp_opinion(path, prompts, encode)
        if opinion is not None:
            ref["llamacpp"] = opinion

    write_json(out, ref)
    for p in prompts:
        print(f"{p['text'][:40]!r:44} -> {p['greedy_text'][:60]!r} (min margin {p['greedy_min_top2_margin']})")
    return 0


def write_json(out: Path, ref: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(ref, indent=1, ensure_ascii=False) + "\n"
    out.write_text(text, encoding="utf-8")
    log(f"wrote {out} ({len(text.encode()) / 1024:.1f} KB)")


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(main())
