#!/usr/bin/env python3
"""Independent numpy re-implementation of the four fixture families' forward passes.

Reads only config.json + model.safetensors (its own safetensors parser, so bf16/f16 are
decoded by hand) and checks the logits and greedy tokens against golden.safetensors.
No torch / transformers needed: this is the executable spec the Rust engine follows.

Usage: python3 scripts/reference_forward.py [tests/fixtures]
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        buf = raw[base + a : base + b]
        dt, shape = info["dtype"], info["shape"]
        if dt == "F32":
            arr = np.frombuffer(buf, "<f4")
        elif dt == "F16":
            arr = np.frombuffer(buf, "<f2").astype(np.float32)
        elif dt == "BF16":
            arr = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "I64":
            arr = np.frombuffer(buf, "<i8")
        else:
            raise ValueError(dt)
        out[name] = arr.reshape(shape).copy()
    return out


def rms_norm(x, w, eps, gemma=False):
    x = x.astype(np.float32)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * ((1.0 + w) if gemma else w)


def inv_freq_for(rp: dict, head_dim: int) -> np.ndarray:
    theta = rp["rope_theta"]
    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    t = rp.get("rope_type", "default")
    if t == "default":
        return inv.astype(np.float32)
    if t == "linear":
        return (inv / rp["factor"]).astype(np.float32)
    if t == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        out = np.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        return np.where(medium, smoothed, out).astype(np.float32)
    raise ValueError(t)


def rope(x, pos, inv):
    # x [heads, T, d]; non-interleaved (rotate_half) layout
    f = pos[:, None].astype(np.float32) * inv[None, :]
    emb = np.concatenate([f, f], -1)
    cos, sin = np.cos(emb), np.sin(emb)
    h = x.shape[-1] // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def silu(x):
    return x / (1 + np.exp(-x))


def forward(cfg: dict, W: dict, ids: list[int]) -> np.ndarray:
    mt = cfg["model_type"]
    gemma = mt == "gemma3_text"
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    L = cfg["num_hidden_layers"]
    T = len(ids)
    pos = np.arange(T)
    x = W["model.embed_tokens.weight"][ids]
    if gemma:
        x = x * np.float32(H**0.5)
    types = cfg.get("layer_types") or ["full_attention"] * L
    rp = cfg["rope_parameters"]
    for i in range(L):
        p = f"model.layers.{i}."
        lt = types[i]
        inv = inv_freq_for(rp[lt] if gemma else rp, hd)
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps, gemma)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd).transpose(1, 0, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd).transpose(1, 0, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd).transpose(1, 0, 2)
        if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps, gemma)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps, gemma)
        q, k = rope(q, pos, inv), rope(k, pos, inv)
        scale = cfg["query_pre_attn_scalar"] ** -0.5 if gemma else hd**-0.5
        qi, kj = pos[:, None], pos[None, :]
        allowed = kj <= qi
        if gemma and lt == "sliding_attention":
            allowed &= (qi - kj) < cfg["sliding_window"]
        rep = nh // nkv
        outs = []
        for hh in range(nh):
            s = (q[hh] @ k[hh // rep].T) * scale
            s = np.where(allowed, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            outs.append(s @ v[hh // rep])
        a = np.stack(outs, 1).reshape(T, nh * hd) @ W[p + "self_attn.o_proj.weight"].T
        if gemma:
            a = rms_norm(a, W[p + "post_attention_layernorm.weight"], eps, True)
            x = x + a
            h = rms_norm(x, W[p + "pre_feedforward_layernorm.weight"], eps, True)
        else:
            x = x + a
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        act = gelu_tanh if gemma else silu
        if p + "mlp.gate.weight" in W:  # Qwen3-MoE sparse block
            logits = h @ W[p + "mlp.gate.weight"].T
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            kk = cfg["num_experts_per_tok"]
            top = np.argsort(-probs, -1, kind="stable")[:, :kk]
            m = np.zeros_like(h)
            for t in range(T):
                wts = probs[t, top[t]]
                if cfg["norm_topk_prob"]:
                    wts = wts / wts.sum()
                for e, wt in zip(top[t], wts):
                    ep = f"{p}mlp.experts.{e}."
                    y = act(h[t] @ W[ep + "gate_proj.weight"].T) * (h[t] @ W[ep + "up_proj.weight"].T)
                    m[t] += wt * (y @ W[ep + "down_proj.weight"].T)
        else:
            m = act(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
            m = m @ W[p + "mlp.down_proj.weight"].T
        if gemma:
            m = rms_norm(m, W[p + "post_feedforward_layernorm.weight"], eps, True)
        x = x + m
    x = rms_norm(x, W["model.norm.weight"], eps, gemma)
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.T


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "tests" / "fixtures")
    ok = True
    for fam in ["llama", "qwen3", "gemma3", "qwen3_moe"]:
        d = root / fam
        cfg = json.loads((d / "config.json").read_text())
        W = load_safetensors(d / "model.safetensors")
        G = load_safetensors(d / "golden.safetensors")
        prompts = json.loads((d / "golden.json").read_text())["prompts"]
        worst, all_same = 0.0, True
        for i, p in enumerate(prompts):
            got = forward(cfg, W, p["ids"])
            worst = max(worst, float(np.abs(got - G[f"logits_{i}"]).max()))
            seq = list(p["ids"])
            for _ in range(16):
                seq.append(int(np.argmax(forward(cfg, W, seq)[-1])))
            same = seq[len(p["ids"]) :] == G[f"greedy_{i}"].tolist()
            all_same &= same
        ok &= worst < 1e-3 and all_same
        print(f"{fam}: max |logits - golden| = {worst:.2e}, greedy {'match' if all_same else 'MISMATCH'}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
