#!/usr/bin/env python3
"""Usage: trace_round.py TRACE.tsv[.gz] [--layer N]   (N: print one layer's launches in detail)

Reads a kernel timeline written by `tensorfold ... --trace FROM:TO` (crates/cuda/src/trace.rs) and prints
where the GPU's time goes in place: each launch's span and its cost on the critical path (its
last warp's end minus the previous launch's), summed by kind, and the gaps between rounds."""
import gzip
import sys
from collections import defaultdict

path = sys.argv[1]
detail = int(sys.argv[sys.argv.index("--layer") + 1]) if "--layer" in sys.argv else None
recs = []
with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
    next(f)
    for line in f:
        f_ = line.rstrip("\n").split("\t")
        name, grid, block, warp, sm, t0, t1 = f_[:7]
        dw, dm = (int(f_[7]), int(f_[8])) if len(f_) > 8 else (0, 0)
        recs.append((int(t0), int(t1), name, int(grid), int(block), int(warp), int(sm), dw, dm))
recs.sort()
if not recs:
    sys.exit("no records")
ticks = sorted({r[0] for r in recs})
step = min((b - a for a, b in zip(ticks, ticks[1:]) if b > a), default=0)
print(f"{len(recs)} warp records; smallest timer step {step} ns")

# Launches: consecutive records (by start time) of one kernel; a launch of a kernel can only
# start once every block of the one before has started (programmatic launch), so start order
# groups them. A warp seen twice opens a new launch of the same kernel.
launches = []
for t0, t1, name, grid, block, warp, sm, dw, dm in recs:
    cur = launches[-1] if launches else None
    if cur is None or cur["name"] != name or (block, warp) in cur["seen"]:
        cur = {"name": name, "grid": grid, "seen": set(), "t0": [], "t1": [], "sms": set(), "tw": [], "tm": [], "dm": []}
        launches.append(cur)
    cur["seen"].add((block, warp))
    cur["t0"].append(t0)
    cur["t1"].append(t1)
    cur["sms"].add(sm)
    if dw:
        cur["tw"].append(t0 + dw)
    if dm:
        cur["tm"].append(t0 + dm)
        cur["dm"].append(dm)

origin = launches[0]["t0"][0]
rounds = [[]]
for l in launches:
    rounds[-1].append(l)
    if l["name"] == "argmax_combine":
        rounds.append([])
rounds = [r for r in rounds if r]


def label(rnd):
    """Names launches: matmuls (GEMVs, and a prefill's GEMMs) by their place in a layer (qkv, o,
    gate_up, down), the last one head."""
    gemv = [i for i, l in enumerate(rnd) if l["name"].startswith(("gemv", "gemm"))]
    names = {}
    for j, i in enumerate(gemv):
        names[i] = "head" if j == len(gemv) - 1 else ["qkv", "o", "gate_up", "down"][j % 4]
    return [f"{l['name']}:{names[i]}" if i in names else l["name"] for i, l in enumerate(rnd)]


prev_end = None
for ri, rnd in enumerate(rounds):
    labels = label(rnd)
    start, end = min(rnd[0]["t0"]), max(max(l["t1"]) for l in rnd)
    gap = "" if prev_end is None else f", {(start - prev_end) / 1e3:.1f} us after the previous round"
    print(f"\nround {ri}: {len(rnd)} launches, {(end - start) / 1e3:.1f} us from first start to last end{gap}")
    by = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    last = start
    rows = []
    for lab, l in zip(labels, rnd):
        e = max(l["t1"])
        inc = e - last
        span = e - min(l["t0"])
        busy = e - max(min(l["t0"]), last)  # from the later of its start and the previous end
        k = by[lab]
        k[0] += 1
        k[1] += inc / 1e3
        k[2] += span / 1e3
        k[3] += busy / 1e3
        rows.append((lab, l, inc, last))
        last = max(last, e)
    total = sum(v[1] for v in by.values())
    # Where a launch's critical time goes: from the previous launch's last end to its launch wait
    # returning (the dependency's latency), then from there to its own last end.
    # A kernel that marks the end of its pre-wait work: from a warp's start to its mark.
    lat = defaultdict(list)
    for lab, l, inc, prev in rows:
        if l["tw"]:
            w = sorted(l["tw"])[len(l["tw"]) // 2]
            pm = sorted(l["dm"])[len(l["dm"]) // 2] / 1e3 if l["dm"] else float("nan")
            lat[lab].append(((w - prev) / 1e3, (max(l["t1"]) - w) / 1e3, pm))
    print(f"{'kernel':<34}{'n':>5}{'critical us':>13}{'per call':>10}{'span/call':>11}{'share':>7}")
    for lab, (n, inc, span, busy) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{lab:<34}{n:>5}{inc:>13.1f}{inc / n:>10.2f}{span / n:>11.2f}{inc / total:>7.1%}")
    if lat:
        print(f"{'kernel':<34}{'wait after prev end':>21}{'wait to end':>13}{'start to mark':>15}  (medians, us)")
        for lab, v in sorted(lat.items(), key=lambda kv: -len(kv[1])):
            a = sorted(x[0] for x in v)
            b = sorted(x[1] for x in v)
            c = sorted(x[2] for x in v)
            print(f"{lab:<34}{a[len(a) // 2]:>21.2f}{b[len(b) // 2]:>13.2f}{c[len(c) // 2]:>15.2f}")
    if detail is not None:
        # Layer N: from the launch before its qkv matmul (the input norm) to the next layer's.
        idx = [max(i - 1, 0) for i, lab in enumerate(labels) if lab.endswith(":qkv")]
        if detail < len(idx):
            a = idx[detail]
            b = idx[detail + 1] if detail + 1 < len(idx) else len(rnd)
            print(f"\n  layer {detail} (us from the layer's first start):")
            base = min(rnd[a]["t0"])
            print(f"  {'kernel':<32}{'warps':>6}{'sms':>5}{'first':>8}{'all in':>8}{'wait':>8}{'mark':>8}"
                  f"{'1st end':>8}{'med end':>8}{'end':>8}{'crit':>7}")
            med = lambda v: f"{(sorted(v)[len(v) // 2] - base) / 1e3:>8.1f}" if v else f"{'-':>8}"
            for lab, l, inc, _ in rows[a:b]:
                t0s, t1s = sorted(l["t0"]), sorted(l["t1"])
                print(f"  {lab:<32}{len(t0s):>6}{len(l['sms']):>5}{(t0s[0] - base) / 1e3:>8.1f}"
                      f"{(t0s[-1] - base) / 1e3:>8.1f}{med(l['tw'])}{med(l['tm'])}{(t1s[0] - base) / 1e3:>8.1f}"
                      f"{med(l['t1'])}{(t1s[-1] - base) / 1e3:>8.1f}{inc / 1e3:>7.1f}")
    prev_end = end
