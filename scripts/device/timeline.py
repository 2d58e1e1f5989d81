"""Reads a kernel timeline (crates/cuda/src/trace.rs TSV, maybe gzipped) into launches: the
shared loader of late_sms.py, gemv_blocks.py, sm_speed.py, o_tiles.py and o_start.py."""
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


def gemv_blocks(launches, k):
    """Each layer's K-th GEMV's blocks (0 qkv, 1 o, 2 gate_up, 3 down; four a layer and the head
    a round), by where they ran: on SMs of the launch just before (ATT), on their TPC partners
    (PART), on SMs of the launch two before when that is no GEMV (PREV2) or their partners
    (PREV2P), the rest (other). Yields (tag, start, end, wait end, mark or 0, w0) in ns, w0 the
    launch's first wait end: o_tiles.py and o_start.py read it."""
    gemv = [i for i, l in enumerate(launches) if l["name"].startswith("gemv")]
    rounds = max(1, sum(1 for l in launches if l["name"] == "embed"))
    per = len(gemv) // rounds
    per_round = (per - 1) // 4
    for layer in range(rounds * per_round):
        rd, ly = divmod(layer, per_round)
        i = gemv[rd * per + ly * 4 + k]
        prev1 = {r.sm for r in launches[i - 1]["recs"]}
        prev2 = set() if launches[i - 2]["name"].startswith("gemv") else {r.sm for r in launches[i - 2]["recs"]}
        blocks = {}
        for r in launches[i]["recs"]:
            v = blocks.setdefault(r.block, [r.sm, 1 << 62, 0, 0, 0])
            v[1], v[2] = min(v[1], r.t0), max(v[2], r.t1)
            v[3] = max(v[3], r.t0 + r.dwait)
            if r.dmark:
                v[4] = max(v[4], r.t0 + r.dmark)
        w0 = min(v[3] for v in blocks.values())
        for sm, start, end, wait, mark in blocks.values():
            tag = ("ATT" if sm in prev1 else "PART" if sm ^ 1 in prev1 else "PREV2" if sm in prev2
                   else "PREV2P" if sm ^ 1 in prev2 else "other")
            yield tag, start, end, wait, mark, w0


def gemv_layers(launches):
    """How many layers gemv_blocks walks."""
    rounds = max(1, sum(1 for l in launches if l["name"] == "embed"))
    per = sum(1 for l in launches if l["name"].startswith("gemv")) // rounds
    return rounds * ((per - 1) // 4)
