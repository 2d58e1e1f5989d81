#!/usr/bin/env bash
# Session 16, call 8 (binary from lab-fold, feff6d4): where the residual GEMV's bf16 copy costs.
# Timelines at 128x1 of U (folding off, copy on) and U0 (both off); layer 18's rows last.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
cat .carry/commit.txt | tee "$OUT/commit.txt"
VARIANTS="U:TF_CUDA_FOLD=0 U0:TF_CUDA_FOLD=0+TF_CUDA_COPY=0" bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
for v in U U0; do
  echo "=== $v"; sed -n '/^round 1/,/^kernel  *wait/p' "$OUT/summary_${v}_128x1.txt" | head -16
  sed -n '/^round 1/,$p' "$OUT/summary_${v}_128x1.txt" | sed -n '/wait after prev/,+9p' | head -10
  sed -n '/^round 1/,$p' "$OUT/summary_${v}_128x1.txt" | sed -n '/layer 18/,+10p'
done
