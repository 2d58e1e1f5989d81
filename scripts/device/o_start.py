#!/usr/bin/env python3
"""When a layer's K-th GEMV's blocks start, wait and get their x row (trace mark X), split as
o_tiles.py splits them (ATT, PART, PREV2, PREV2P, other): medians in us from the launch's first
wait end (w0). Tells blocks that start late (after w0) from blocks whose row is late.

usage: o_start.py TRACE.tsv[.gz] [K=1]"""
import collections
import statistics as st
import sys

import timeline

L = timeline.launches(sys.argv[1])
k = int(sys.argv[2]) if len(sys.argv) > 2 else 1
gemv = [i for i, l in enumerate(L) if l["name"].startswith("gemv")]
rounds = max(1, sum(1 for l in L if l["name"] == "embed")); per = len(gemv) // rounds
nl = (per - 1) // 4
by = collections.defaultdict(list)
for layer in range(rounds * nl):
    rd, ly = divmod(layer, nl); i = gemv[rd * per + ly * 4 + k]
    prev1 = {r.sm for r in L[i-1]["recs"]}
    prev2 = {r.sm for r in L[i-2]["recs"]} if not L[i-2]["name"].startswith("gemv") else set()
    blocks = {}
    for r in L[i]["recs"]:
        v = blocks.setdefault(r.block, [r.sm, 1 << 62, 0, 0, 0])
        v[1] = min(v[1], r.t0); v[2] = max(v[2], r.t1); v[3] = max(v[3], r.t0 + r.dwait); v[4] = max(v[4], r.t0 + r.dmark)
    w0 = min(v[3] for v in blocks.values())
    for b, (sm, a, e, w, m) in blocks.items():
        tag = ("ATT" if sm in prev1 else "PART" if sm ^ 1 in prev1 else "PREV2" if sm in prev2 else "PREV2P" if sm ^ 1 in prev2 else "other")
        by[tag].append(((a - w0) / 1e3, (w - a) / 1e3, (m - w) / 1e3, (e - w0) / 1e3))
print(f"{'tag':>7} {'n':>5} {'start-w0':>9} {'wait-start':>10} {'x lands':>8} {'end-w0':>7}  (medians, us; w0 = launch's first wait end)")
for t in ["ATT", "PART", "PREV2", "PREV2P", "other"]:
    v = by[t]
    if not v:
        continue
    print(f"{t:>7} {len(v):5d} " + " ".join(f"{st.median([x[j] for x in v]):9.2f}" for j in range(4)))
# how many blocks start after w0
late = [x for t in by for x in by[t] if x[0] > 0]
print("blocks starting after w0:", len(late), "of", sum(len(v) for v in by.values()))
