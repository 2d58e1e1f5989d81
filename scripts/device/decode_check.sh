#!/usr/bin/env bash
# Device call for a decode-side change: the CUDA tests, then decode of this build interleaved
# against a baseline (.carry/a, or this build under a lab setting), then a kernel timeline of a
# batch-1 round (trace.sh; CASES=none leaves it out).
#   A="U=.carry/tensorfold:TF_LAB_M1=glu-apart"  ROUNDS=3  CASES="128x1"
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
for t in ops golden engine; do
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | grep -E "^test result|FAILED|panicked" | tee -a "$OUT/tests.txt"
done
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 64 --repeat 1" \
  bash scripts/device/abc.sh "${A:-A=.carry/a/tensorfold} F=.carry/tensorfold" "${ROUNDS:-3}" \
  | tee "$OUT/abc.txt"
[[ ${CASES:-128x1} != none ]] && bash scripts/device/trace.sh .carry/tensorfold "${CASES:-128x1}" > "$OUT/trace.txt" 2>&1
sed -n '/^round 1/,$p' "$OUT/summary_F_128x1.txt" 2>/dev/null | cut -c1-120
cat "$OUT/tests.txt" "$OUT/abc.txt"
