#!/usr/bin/env python3
"""One GEMV launch of one layer in a timeline (crates/cuda/src/trace.rs), block by block: the
three launches before it (blocks, SMs, start-end), then each of its blocks' SM, tiles (the
kernel's static split of NTOT tiles), start, wait, the first tile's end (the trace build's
mark, its last warp's), end and lateness against the median end, tagged ATT when it ran on an
SM of the launch just before it and PART on the TPC partner of one (SM id ^ 1). Late, tagged
and every 16th block are printed.

usage: gemv_blocks.py TRACE.tsv[.gz] LAYER K [NTOT=256]   (K: 0 qkv, 1 o, 2 gate_up, 3 down)"""
import collections
import statistics as st
import sys

import timeline

path, layer, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ntot = int(sys.argv[4]) if len(sys.argv) > 4 else 256
launches = timeline.launches(path)
gemv = [i for i, l in enumerate(launches) if l["name"].startswith("gemv")]
i = gemv[layer * 4 + k]
t00 = launches[max(i - 3, 0)]["recs"][0].t0
us = lambda t: (t - t00) / 1e3
for j in range(max(i - 3, 0), i):
    spans = collections.defaultdict(lambda: [1 << 62, 0])
    for r in launches[j]["recs"]:
        s = spans[(r.block, r.sm)]
        s[0], s[1] = min(s[0], r.t0), max(s[1], r.t1)
    sms = sorted({sm for _, sm in spans})
    a, e = min(s[0] for s in spans.values()), max(s[1] for s in spans.values())
    print(f"{launches[j]['name']}: {len(spans)} blocks on SMs {sms if len(sms) <= 16 else len(sms)}, {us(a):.1f}-{us(e):.1f} us")
before = {r.sm for r in launches[i - 1]["recs"]}
blocks, marks = {}, {}
for r in launches[i]["recs"]:
    v = blocks.setdefault(r.block, [r.sm, 1 << 62, 0, r.dwait])
    v[1], v[2] = min(v[1], r.t0), max(v[2], r.t1)
    if r.dmark:
        marks[r.block] = max(marks.get(r.block, 0), r.t0 + r.dmark)
med = st.median(v[2] for v in blocks.values())
tq, tr = divmod(ntot, len(blocks))
print(f"{launches[i]['name']} (layer {layer}, K {k}): {len(blocks)} blocks, median end {us(med):.1f} us")
for b, (sm, a, e, dw) in sorted(blocks.items(), key=lambda x: x[1][2]):
    tag = "ATT" if sm in before else "PART" if sm ^ 1 in before else ""
    if e - med > 1500 or tag or b % 16 == 0:
        tiles = tq + (1 if b < tr else 0)
        mk = f" tile1 {us(marks[b]):6.1f}" if b in marks else ""
        print(f"  blk {b:3d} sm {sm:3d} tiles {tiles} start {us(a):6.1f} wait {us(a + dw):6.1f}{mk} end {us(e):6.1f} late {(e - med) / 1e3:+5.1f} {tag}")
