#!/usr/bin/env bash
# Usage: PROMPT=4096 WHOLE=1 scripts/device/profile_prefill.sh
# Where a prefill's time goes. ncu kernel durations of one PROMPT-token prefill of a
# 2-layer qwen3-8b-shaped model, summed per kernel.   PROMPT=4096  WHOLE=1 (the bench's one-piece
# prefill; else `generate`, which the engine prefills in 512-token chunks: the first is summed)
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold
[[ -f /tmp/qsmall/config.json ]] || timeout 120 "$BIN" synth --like qwen3-8b --layers 2 --out /tmp/qsmall 2>&1 | tail -1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
IDS=$(seq -s, 1 "${PROMPT:-4096}")
RUN=("$BIN" generate --model /tmp/qsmall --device cuda --ids "$IDS" --max-tokens 1 --json)
[[ ${WHOLE:-0} == 1 ]] && RUN=("$BIN" bench --model /tmp/qsmall --device cuda --prompt-len "${PROMPT:-4096}" --batch 1 --gen-len 1 --repeat 1)
timeout 300 "$NCU" --clock-control ${CLOCK:-none} --cache-control ${CACHE:-all} --metrics gpu__time_duration.sum --csv \
  "${RUN[@]}" > "$OUT/ncu_prefill.csv" 2> "$OUT/ncu_prefill.err"
python3 scripts/device/ncu_sum.py "$OUT/ncu_prefill.csv" --first
