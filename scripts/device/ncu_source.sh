#!/usr/bin/env bash
# Device call: ncu's per-instruction stall samples (SASS, CSV) of one instance of each kernel
# matching KERNELS in the bench's one-piece PROMPT-token prefill of a 2-layer qwen3-8b-shaped
# model, and the instructions with the most samples.   KERNELS="gemm_wgmma" SKIP=2 PROMPT=4096
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=${BIN:-.carry/tensorfold}
PROMPT=${PROMPT:-4096}
[[ -f /tmp/qsmall/config.json ]] || timeout 120 "$BIN" synth --like qwen3-8b --layers 2 --out /tmp/qsmall 2>&1 | tail -1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 "$NCU" --clock-control base -k "regex:${KERNELS:-gemm_wgmma}" --launch-skip "${SKIP:-0}" --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o "$OUT/src" \
  "$BIN" bench --model /tmp/qsmall --device cuda --prompt-len "$PROMPT" --batch 1 --gen-len 1 --repeat 1 > "$OUT/src.log" 2>&1
echo "ncu rc=$?"
"$NCU" --import "$OUT/src.ncu-rep" --page source --csv --print-source sass > "$OUT/src.csv" 2> "$OUT/src.err"
python3 - "$OUT/src.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if "Source" in r), None)
if hdr is None or not any(n.startswith("Warp Stall Sampling (All") for n in rows[hdr]):
    sys.exit(f"unexpected CSV: {rows[:3]}")
h = rows[hdr]
src = h.index("Source")
samp = next(i for i, n in enumerate(h) if n.startswith("Warp Stall Sampling (All"))
data = [(float(r[samp] or 0), r[src]) for r in rows[hdr + 1:] if len(r) > samp]
tot = sum(s for s, _ in data) or 1
print(f"{len(data)} instructions, {tot:.0f} samples")
for s, t in sorted(data, reverse=True)[:25]:
    print(f"{100 * s / tot:5.1f}%  {t[:110]}")
PY
