#!/usr/bin/env python3
"""How fast each kind of block of a layer's K-th GEMV streams its first tile and the rest, over a
timeline's layers (crates/cuda/src/trace.rs; the trace build marks a GEMV block's first tile end):
blocks on SMs of the launch just before (ATT), on their TPC partners (PART), on SMs of the launch
two before (PREV2, e.g. qk_norm_rope before o) or their partners (PREV2P), and the rest. Medians
in us: wait to first tile end, first tile end to block end, wait to end.

usage: o_tiles.py TRACE.tsv[.gz] [K=1]   (K: 0 qkv, 1 o, 2 gate_up, 3 down)"""
import collections
import statistics as st
import sys

import timeline

path = sys.argv[1]
k = int(sys.argv[2]) if len(sys.argv) > 2 else 1
launches = timeline.launches(path)
gemv = [i for i, l in enumerate(launches) if l["name"].startswith("gemv")]
rounds = max(1, sum(1 for l in launches if l["name"] == "embed"))
per = len(gemv) // rounds  # four GEMVs a layer and the head
layers = rounds * ((per - 1) // 4)
by = collections.defaultdict(lambda: ([], [], [], []))
for layer in range(layers):
    rd, ly = divmod(layer, (per - 1) // 4)
    i = gemv[rd * per + ly * 4 + k]
    prev1 = {r.sm for r in launches[i - 1]["recs"]}
    prev2 = {r.sm for r in launches[i - 2]["recs"]} if not launches[i - 2]["name"].startswith("gemv") else set()
    blocks = {}
    for r in launches[i]["recs"]:
        v = blocks.setdefault(r.block, [r.sm, 1 << 62, 0, 0, 0])
        v[1], v[2] = min(v[1], r.t0), max(v[2], r.t1)
        v[3] = max(v[3], r.t0 + r.dwait)
        if r.dmark:
            v[4] = max(v[4], r.t0 + r.dmark)
    for sm, a, e, w, m in blocks.values():
        tag = ("ATT" if sm in prev1 else "PART" if sm ^ 1 in prev1 else "PREV2" if sm in prev2
               else "PREV2P" if sm ^ 1 in prev2 else "other")
        t = by[tag]
        t[0].append((m - w) / 1e3 if m else float("nan"))
        t[1].append((e - m) / 1e3 if m else float("nan"))
        t[2].append((e - w) / 1e3)
        t[3].append(a)
print(f"{launches[gemv[k]]['name']} K {k} over {layers} layers")
print(f"{'blocks':>8} {'n':>6} {'tile 1':>8} {'rest':>8} {'wait-end':>9}")
for tag in ["ATT", "PART", "PREV2", "PREV2P", "other"]:
    if tag in by:
        t = by[tag]
        print(f"{tag:>8} {len(t[2]):6d} {st.median(t[0]):8.2f} {st.median(t[1]):8.2f} {st.median(t[2]):9.2f}")
