#!/usr/bin/env bash
# Session 16, call 1: the ceiling of taking chain links out of a batch-1 decode layer. skip.sh
# variants on one binary (results wrong, times only): none, the norms made for matmuls (2), glu
# (4), both (6), qk_norm_rope (8); prompt 128 and 4096, batch 1 and 8.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
cat .carry/commit.txt | tee "$OUT/commit.txt"
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 2" \
  bash scripts/device/skip.sh .carry/tensorfold "S=0 S=2 S=4 S=6 S=8 S=0+M=" 2>&1 | tee "$OUT/skip.txt"
