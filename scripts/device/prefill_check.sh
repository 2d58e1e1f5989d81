#!/usr/bin/env bash
# Device call for a prefill-side change: the CUDA tests, the 4096-token prefill's kernels (ncu),
# prefill of .carry/a against this build interleaved, then where a batch-1 decode round goes
# (skip.sh).   PROMPTS=512,4096  ROUNDS=2  SKIP="S=0 S=1 S=8 S=31"
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
for t in ops golden engine; do
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | grep -E "^test result|FAILED|panicked"
done
PROMPT=4096 LABS="" bash scripts/device/prefill_kernels.sh 2>&1 | grep -v "^in order"
ARGS="--prompt-len ${PROMPTS:-512,4096} --batch 1 --gen-len 4 --repeat 1" \
  bash scripts/device/abc.sh "O=.carry/a/tensorfold F=.carry/tensorfold" "${ROUNDS:-2}"
ARGS="--prompt-len 128 --batch 1 --gen-len 64 --repeat 1" bash scripts/device/skip.sh .carry/tensorfold "${SKIP:-S=0 S=1 S=8 S=31}" 2>&1 | tail -8
