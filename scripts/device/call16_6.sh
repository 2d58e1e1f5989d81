#!/usr/bin/env bash
# Session 16, call 6 (binary from branch lab-fold at its whole-sector copy commit): does the
# residual GEMV's bf16 copy cost because it was written in half sectors? A = session start,
# U = folding off with the copy, U0 = both off, F = folded; 2 interleaved rounds.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
cat .carry/commit.txt | tee "$OUT/commit.txt"
B=.carry/tensorfold
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold U=$B:TF_CUDA_FOLD=0 U0=$B:TF_CUDA_FOLD=0+TF_CUDA_COPY=0 F=$B" 2 2>&1 | tee "$OUT/abc.txt"
