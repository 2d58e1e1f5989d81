"""Reads a kernel timeline (crates/cuda/src/trace.rs TSV, maybe gzipped) into launches: the
shared loader of late_sms.py, gemv_blocks.py and sm_speed.py."""
import collections
import gzip

# One warp's record: start and end (ns), kernel, grid, block, warp, SM, and its launch-wait and
# mark offsets from the start (ns, 0 when not recorded).
Rec = collections.namedtuple("Rec", "t0 t1 name grid block warp sm dwait dmark")


def records(path):
    """Every warp record of the timeline at `path`, by start time."""
    recs = []
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        next(f)
        for line in f:
            p = line.rstrip("\n").split("\t")
            extra = (int(p[7]), int(p[8])) if len(p) > 8 else (0, 0)
            recs.append(Rec(int(p[5]), int(p[6]), p[0], int(p[1]), int(p[2]), int(p[3]), int(p[4]), *extra))
    recs.sort()
    return recs


def launches(path):
    """The timeline's launches in order, each {"name", "grid", "recs"}: consecutive records of one
    kernel, a warp seen twice opening the next launch of it."""
    out, seen = [], set()
    for r in records(path):
        if not out or out[-1]["name"] != r.name or (r.block, r.warp) in seen:
            out.append({"name": r.name, "grid": r.grid, "recs": []})
            seen = set()
        seen.add((r.block, r.warp))
        out[-1]["recs"].append(r)
    return out
