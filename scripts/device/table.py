#!/usr/bin/env python3
"""Usage: table.py OURS.json [PEER.json]

Prints the closing table of a device run: our bench JSON beside the peer's, with ratios."""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    ours, peer = load(sys.argv[1]), load(sys.argv[2]) if len(sys.argv) > 2 else None
    if not ours:
        print("no bench results")
        return 1
    lim = ours.get("limits") or {}
    print(f"limits: copy {lim.get('copy_gb_s', float('nan')):.0f} GB/s, bf16 GEMM {lim.get('gemm_tflops', float('nan')):.0f} TFLOP/s;"
          f" weights {ours.get('weight_bytes_bf16', 0) / 1e9:.2f} GB")
    pk = {(r["prompt_len"], r["batch"]): r for r in (peer or {}).get("results", [])}
    print(f"{'prompt':>6} {'batch':>5} | {'ttft ms':>8} {'prefill tok/s':>13} {'mfu':>5} | {'ms/round':>8} {'tok/s':>8} {'roofline':>8} {'cublas':>6}"
          f" | {'peer tok/s':>10} {'ours/peer':>9} {'peer ttft':>9}")
    for r in ours["results"]:
        p = pk.get((r["prompt_len"], r["batch"]))
        ratio = r["decode_tok_s"] / p["decode_tok_s"] if p else float("nan")
        print(f"{r['prompt_len']:>6} {r['batch']:>5} | {r['ttft_ms']:>8.1f} {r['prefill_tok_s']:>13.0f} {r.get('prefill_mfu', float('nan')):>5.2f}"
              f" | {r['decode_round_ms']:>8.3f} {r['decode_tok_s']:>8.1f} {r.get('decode_roofline_ratio', float('nan')):>8.3f}"
              f" {r.get('cublas_round_ratio', float('nan')):>6.3f}"
              f" | {p['decode_tok_s'] if p else float('nan'):>10.1f} {ratio:>9.2f} {p['ttft_ms'] if p else float('nan'):>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
