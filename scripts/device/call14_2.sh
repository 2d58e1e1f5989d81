#!/usr/bin/env bash
# Session 14, call 2: decode_check.sh (device tests, this build against .carry/a interleaved, a
# 128x1 timeline), then the head's time in the first decode rounds of a process with graphs
# (round 3 runs op by op, 4 is captured, 5-7 replayed; rounds 1-2 include the load).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3} bash scripts/device/decode_check.sh
TF_TRACE=3:7 TF_TRACE_OUT="$OUT/trace_early.tsv" XDG_CACHE_HOME=/tmp/xdg timeout 300 .carry/tensorfold bench \
  --model /tmp/qwen3-8b --device cuda --prompt-len 128 --batch 1 --gen-len 64 --repeat 2 2>&1 | tail -1
python3 scripts/device/trace_round.py "$OUT/trace_early.tsv" > "$OUT/summary_early.txt" 2>&1
gzip -f "$OUT/trace_early.tsv"
grep -E "^round|gemv_tma_n1:head  " "$OUT/summary_early.txt" | awk '/^round/{printf "\n%s", $0; next}{printf "  | head %s", $4}'
echo
