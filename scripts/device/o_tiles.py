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
by = collections.defaultdict(lambda: ([], [], []))
for tag, _start, e, w, m, _w0 in timeline.gemv_blocks(launches, k):
    t = by[tag]
    t[0].append((m - w) / 1e3 if m else float("nan"))
    t[1].append((e - m) / 1e3 if m else float("nan"))
    t[2].append((e - w) / 1e3)
gemv = next(l for l in launches if l["name"].startswith("gemv"))
print(f"{gemv['name']} K {k} over {timeline.gemv_layers(launches)} layers")
print(f"{'blocks':>8} {'n':>6} {'tile 1':>8} {'rest':>8} {'wait-end':>9}")
for tag in ["ATT", "PART", "PREV2", "PREV2P", "other"]:
    if tag in by:
        t = by[tag]
        print(f"{tag:>8} {len(t[2]):6d} {st.median(t[0]):8.2f} {st.median(t[1]):8.2f} {st.median(t[2]):9.2f}")
