#!/usr/bin/env python3
"""Per-SM streaming speed of the TMA GEMVs in a kernel timeline (crates/cuda/src/trace.rs): for
each GEMV of a round's layers and the head, each block's time from the launch's median wait
return to its end, per tile it streamed (its static run: the first ntot % grid blocks take one
more), relative to the launch's median; then per SM the median over launches of a kind, the
spread of those, and the time a run weighted by those speeds would take against the launch's
actual last block end.

usage: sm_speed.py TRACE.tsv[.gz]"""
import collections
import statistics as st
import sys

import timeline

TILES = {"qkv": 384, "o": 256, "gate_up": 1536, "down": 256, "head": 9496}
launches = timeline.launches(sys.argv[1])
# The first round: launches up to the first argmax_combine.
end = next(i for i, l in enumerate(launches) if l["name"] == "argmax_combine")
gemv = [l for l in launches[:end] if l["name"].startswith("gemv")]
kinds = ["qkv", "o", "gate_up", "down"] * ((len(gemv) - 1) // 4) + ["head"]
rel = collections.defaultdict(lambda: collections.defaultdict(list))  # kind -> sm -> [time per tile / median]
loss = collections.defaultdict(list)
for kind, l in zip(kinds, gemv):
    G, ntot = l["grid"], TILES[kind]
    tq, tr = divmod(ntot, G)
    blocks = {}
    for r in l["recs"]:
        x = blocks.setdefault(r.block, [r.sm, 0, []])
        x[1] = max(x[1], r.t1)
        if r.dwait:
            x[2].append(r.t0 + r.dwait)
    wait = st.median(w for x in blocks.values() for w in x[2])
    per = {x[0]: (x[1] - wait) / (tq + (b < tr)) for b, x in blocks.items()}
    med = st.median(per.values())
    for sm, v in per.items():
        rel[kind][sm].append(v / med)
    # Weighted: every SM streams at its own measured speed; tiles dealt in proportion, so all end
    # together at ntot / sum(1 / per) (against the actual last end).
    ideal = ntot / sum(1 / v for v in per.values())
    actual = max(x[1] for x in blocks.values()) - wait
    loss[kind].append((actual, ideal))
print(f"{len(gemv)} GEMV launches in the first round")
print(f"{'kind':>8} {'actual us':>10} {'weighted us':>12} {'saved us':>9} (medians a launch)")
for kind in ["qkv", "o", "gate_up", "down", "head"]:
    a = st.median(x[0] for x in loss[kind]) / 1e3
    i = st.median(x[1] for x in loss[kind]) / 1e3
    print(f"{kind:>8} {a:>10.2f} {i:>12.2f} {a - i:>9.2f}")
print("per SM: median relative time a tile (1 = the launch's median), by kind; sorted by gate_up")
order = sorted(rel["gate_up"], key=lambda s: st.median(rel["gate_up"][s]))
print("sm   " + " ".join(f"{k:>8}" for k in ["qkv", "o", "gate_up", "down", "head"]) + "  gate_up p10-p90")
for sm in order:
    row = []
    for k in ["qkv", "o", "gate_up", "down", "head"]:
        v = rel[k].get(sm)
        row.append(f"{st.median(v):>8.3f}" if v else f"{'-':>8}")
    g = sorted(rel["gate_up"][sm])
    print(f"{sm:>3}  " + " ".join(row) + f"  {g[len(g) // 10]:.3f}-{g[(9 * len(g)) // 10]:.3f}")
