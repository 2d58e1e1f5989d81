#!/usr/bin/env python3
"""Usage: ncu_sum.py NCU.csv [--first]

Sums an `ncu --metrics gpu__time_duration.sum --csv` log per kernel for one forward: the last
one (from the last `embed`, a decode round) or with --first the first one (a prefill)."""
import collections
import csv
import sys


def main():
    path, first = sys.argv[1], "--first" in sys.argv[2:]
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    hdr = [r for r in rows if r[0] == "ID"][0]
    rows = [r for r in rows if r[0] != "ID"]
    ki, vi, gi = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Grid Size")
    ks = [(r[ki].split("(")[0], float(r[vi].replace(",", "")), r[gi]) for r in rows]
    embeds = [i for i, k in enumerate(ks) if k[0] == "embed"]
    if first:
        fwd = ks[embeds[0]:embeds[1]] if len(embeds) > 1 else ks[embeds[0]:]
    else:
        fwd = ks[embeds[-1]:]
    s = sum(v for _, v, _ in fwd)
    tot = collections.defaultdict(lambda: [0, 0.0])
    for n, v, _ in fwd:
        tot[n][0] += 1
        tot[n][1] += v
    print(f"{'first' if first else 'last'} forward: {len(fwd)} kernels, sum {s / 1000:.1f} us")
    for n, (c, v) in sorted(tot.items(), key=lambda x: -x[1][1]):
        print(f"  {n:24s} x{c:3d} {v / 1000:9.1f} us {100 * v / s:5.1f}%")
    print("in order:", "  ".join(f"{n}{g.replace(' ', '')}:{v / 1000:.1f}" for n, v, g in fwd[:60]))


if __name__ == "__main__":
    main()
