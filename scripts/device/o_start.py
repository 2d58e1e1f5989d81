#!/usr/bin/env python3
"""When a layer's K-th GEMV's blocks start, wait and get their x row (trace mark X), split as
o_tiles.py splits them (ATT, PART, PREV2, PREV2P, other): medians in us from the launch's first
wait end (w0). Tells blocks that start late (after w0) from blocks whose row is late.

usage: o_start.py TRACE.tsv[.gz] [K=1]"""
import collections
import statistics as st
import sys

import timeline

launches = timeline.launches(sys.argv[1])
k = int(sys.argv[2]) if len(sys.argv) > 2 else 1
by = collections.defaultdict(list)
for tag, a, e, w, m, w0 in timeline.gemv_blocks(launches, k):
    by[tag].append(((a - w0) / 1e3, (w - a) / 1e3, (m - w) / 1e3 if m else float("nan"), (e - w0) / 1e3))
print(f"{'tag':>7} {'n':>5} {'start-w0':>9} {'wait-start':>10} {'x lands':>8} {'end-w0':>7}"
      "  (medians, us; w0 = launch's first wait end)")
for tag in ["ATT", "PART", "PREV2", "PREV2P", "other"]:
    v = by[tag]
    if v:
        print(f"{tag:>7} {len(v):5d} " + " ".join(f"{st.median([x[j] for x in v]):9.2f}" for j in range(4)))
late = sum(1 for v in by.values() for x in v if x[0] > 0)
print("blocks starting after w0:", late, "of", sum(len(v) for v in by.values()))
