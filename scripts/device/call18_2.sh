#!/usr/bin/env bash
# Session 18, call 2: gemv_tma_xr with each warp's x segment as one bulk copy. read_lab (the
# GEMV's box pattern, strided against contiguous), the ops and engine tests, N1 (gemv_tma_n1 at
# one row, lab tma-n1) / B (gemv_tma_xr) / P10 (B with 10 stages before the launch wait) at
# batch 1, B's timeline at 128x1. Everything but the printed tables goes into one archive.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" "$W"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$W/synth.txt" 2>&1 &)
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
stamp read_lab
"$NVCC" -O3 -arch=sm_90a scripts/device/read_lab.cu -o /tmp/read_lab 2>&1 | tail -3 && timeout 60 /tmp/read_lab | tee "$OUT/read_lab.txt"
for t in ops engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$W/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
OUT=$W/dense bash scripts/device/abc.sh "N1=.carry/tensorfold:TF_LAB_M1=tma-n1 B=.carry/tensorfold P10=.carry/tensorfold:TF_GEMV_PRE=10" 3 2>&1 | tee "$OUT/abc.txt"
stamp trace
OUT=$W VARIANTS="B" bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$W/trace.txt" 2>&1
sed -n '/^round 1/,$p' "$W/summary_B_128x1.txt" | sed -n '1,22p;/layer 18/,$p' | tee "$OUT/summary_B.txt"
tar czf "$OUT/work.tgz" -C "$W" .
stamp done
