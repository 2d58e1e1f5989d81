#!/usr/bin/env python3
"""Usage: tp_compare.py TP.json ONE.json LABEL: a tensor-parallel bench beside one rank's (the
same checkpoint, prompts and batches), each row's decode and prefill over one rank's, and the
decode roofline ratio and prefill MFU against the cards the ranks ran on."""
import json
import sys

tp = json.load(open(sys.argv[1]))
try:
    one = {(r["prompt_len"], r["batch"]): r for r in json.load(open(sys.argv[2]))["results"]}
except OSError:
    one = {}
print(f"{sys.argv[3]}: {tp.get('tensor_parallel_size')} ranks on {tp.get('cards')} card(s)")
for r in tp["results"]:
    b = one.get((r["prompt_len"], r["batch"]))
    roof, mfu = r.get("decode_roofline_ratio"), r.get("prefill_mfu")
    line = (f"prompt {r['prompt_len']:>5} batch {r['batch']:>3}: decode {r['decode_tok_s']:9.1f} tok/s "
            f"roofline {'-' if roof is None else f'{roof:.3f}'}, prefill {r['prefill_tok_s']:9.1f} tok/s "
            f"mfu {'-' if mfu is None else f'{mfu:.3f}'}")
    if b:
        line += (f" | over 1 rank: decode {r['decode_tok_s'] / b['decode_tok_s']:.3f}, "
                 f"prefill {r['prefill_tok_s'] / b['prefill_tok_s']:.3f}")
    print(line)
