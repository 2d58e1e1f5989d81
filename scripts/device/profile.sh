#!/usr/bin/env bash
# Usage: LAYERS=2 PROMPT=128 GEN=8 CACHE=all scripts/device/profile.sh
# Where a decode round's time goes. ncu kernel durations for a few decode rounds of a
# 2-layer qwen3-8b-shaped model (one layer's kernels, their share), then the full bench at batch 1.
# CACHE=all: ncu flushes caches between kernels; none keeps them warm.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold
LAYERS=${LAYERS:-2}
PROMPT=${PROMPT:-128}
timeout 120 "$BIN" synth --like qwen3-8b --layers "$LAYERS" --out /tmp/qsmall 2>&1 | tail -1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
IDS=$(seq -s, 1 "$PROMPT")
timeout 300 "$NCU" --clock-control ${CLOCK:-none} --cache-control ${CACHE:-all} --metrics gpu__time_duration.sum --csv \
  "$BIN" generate --model /tmp/qsmall --device cuda --ids "$IDS" --max-tokens ${GEN:-8} --json \
  > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$? lines=$(wc -l < "$OUT/ncu.csv")"; tail -3 "$OUT/ncu.err"
python3 scripts/device/ncu_sum.py "$OUT/ncu.csv"
timeout 200 "$BIN" bench --model /tmp/qsmall --device cuda --prompt-len ${PROMPT} --batch 1 --gen-len 32 --repeat 1 2>&1 | tail -3
