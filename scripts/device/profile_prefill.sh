#!/usr/bin/env bash
# Device call: where a prefill's time goes. ncu kernel durations of one PROMPT-token prefill of a
# 2-layer qwen3-8b-shaped model, summed per kernel.   PROMPT=4096
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold
[[ -f /tmp/qsmall/config.json ]] || timeout 120 "$BIN" synth --like qwen3-8b --layers 2 --out /tmp/qsmall 2>&1 | tail -1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
IDS=$(seq -s, 1 "${PROMPT:-4096}")
timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
  "$BIN" generate --model /tmp/qsmall --device cuda --ids "$IDS" --max-tokens 1 --json \
  > "$OUT/ncu_prefill.csv" 2> "$OUT/ncu_prefill.err"
python3 - "$OUT/ncu_prefill.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = [r for r in rows if r[0] == "ID"][0]
rows = [r for r in rows if r[0] != "ID"]
ki, vi, gi = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Grid Size")
ks = [(r[ki].split("(")[0], float(r[vi].replace(",", "")), r[gi]) for r in rows]
first = min(i for i, k in enumerate(ks) if k[0] == "embed")
rnd = ks[first:]
s = sum(v for _, v, _ in rnd)
tot = collections.defaultdict(lambda: [0, 0.0])
for n, v, _ in rnd:
    tot[n][0] += 1
    tot[n][1] += v
print(f"prefill: {len(rnd)} kernels, sum {s / 1000:.1f} us")
for n, (c, v) in sorted(tot.items(), key=lambda x: -x[1][1]):
    print(f"  {n:24s} x{c:3d} {v / 1000:9.1f} us {100 * v / s:5.1f}%")
print("in order:", "  ".join(f"{n}{g.replace(' ', '')}:{v / 1000:.1f}" for n, v, g in rnd[:40]))
PY
