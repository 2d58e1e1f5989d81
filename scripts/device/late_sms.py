#!/usr/bin/env python3
"""Which SMs' blocks end late in a traced GEMV, layer after layer (crates/cuda/src/trace.rs
timelines): for the K-th GEMV of each layer (0 qkv, 1 o, 2 gate_up, 3 down), the blocks that end
more than 1.5 us after the launch's median block end, counted by SM over the layers, and the
other kernels' SMs around the qkv GEMV of a few layers (which SMs early-launched blocks sit on),
and the K-th GEMV's block ends by where they ran against the kernel launched just before it: on
one of its SMs, on the TPC partner of one (SM id ^ 1), or elsewhere (session 20: o's blocks on
the partners of decode attention's SMs all ended about 5 us late).

usage: late_sms.py TRACE.tsv[.gz] K [LAYERS=36]   (the first round's layers)"""
import collections
import statistics as st
import sys

import timeline

path, k = sys.argv[1], int(sys.argv[2])
launches = timeline.launches(path)
gemv = [i for i, l in enumerate(launches) if l["name"].startswith("gemv")]
layers = int(sys.argv[3]) if len(sys.argv) > 3 else 36
count = collections.Counter()
where = collections.defaultdict(list)  # place -> block ends after the launch's median (us)
for layer in range(layers):
    i = gemv[layer * 4 + k]
    before = {r.sm for r in launches[i - 1]["recs"]} if i > 0 else set()
    blocks = {}
    for r in launches[i]["recs"]:
        b = blocks.setdefault(r.block, [r.sm, 0])
        b[1] = max(b[1], r.t1)
    med = st.median(v[1] for v in blocks.values())
    for sm, end in blocks.values():
        if end - med > 1500:
            count[sm] += 1
        place = "on its SMs" if sm in before else "TPC partner" if sm ^ 1 in before else "elsewhere"
        where[place].append((end - med) / 1e3)
print(f"{layers} layers; late blocks {sum(count.values())}; by SM:", sorted(count.items(), key=lambda x: -x[1])[:20])
prev = launches[gemv[k] - 1]["name"] if gemv[k] > 0 else "-"
for place, ends in sorted(where.items()):
    late = sum(e > 1.5 for e in ends)
    print(f"blocks {place} of the kernel before ({prev}): {len(ends)}, late {late}, end after the median {st.median(ends):+.2f} us")
for layer in (5, layers // 2, layers - 6):
    qi = gemv[layer * 4]
    for l in launches[qi - 2 : qi + 3]:
        if not l["name"].startswith("gemv"):
            print(f"layer {layer}: {l['name']} on SMs {sorted({r.sm for r in l['recs']})}")
