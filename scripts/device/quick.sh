#!/usr/bin/env bash
# Device call for a small kernel change: the CUDA tests, the 4-layer decode kernel profile (ncu,
# caches kept warm), and a receipt of this build (.carry/tensorfold) against .carry/a/tensorfold.
#   ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 64 --repeat 1"  ROUNDS=2
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
STEPS=tests bash scripts/device/run_all.sh > "$OUT/run_tests.log" 2>&1
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
LAYERS=4 CACHE=none GEN=4 bash scripts/device/profile.sh 2>&1 | grep -v "^in order" | tail -14
ARGS=${ARGS:-"--prompt-len 128,4096 --batch 1,8 --gen-len 64 --repeat 1"} \
  bash scripts/device/receipt.sh .carry/a/tensorfold .carry/tensorfold "${ROUNDS:-2}" 2>&1 | tail -24
