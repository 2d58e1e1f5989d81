#!/usr/bin/env bash
# Session 16, call 4: what costs in the folded build. Decode A/B of A = session start, U = folding
# off, U0 = folding and the residual's bf16 copy off, F = folded, F0 = folded without the copy
# (the folded matmuls then convert h themselves); 3 interleaved rounds.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
cat .carry/commit.txt | tee "$OUT/commit.txt"
B=.carry/tensorfold
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold U=$B:TF_CUDA_FOLD=0 U0=$B:TF_CUDA_FOLD=0+TF_CUDA_COPY=0 F=$B F0=$B:TF_CUDA_COPY=0" 3 2>&1 | tee "$OUT/abc.txt"
