#!/usr/bin/env bash
# Session 15, call 3: sample_select with shared-memory staging: the candidate and engine tests,
# then the sampling modes of `bench --sample` at three temperatures (batch 1, 8, 64).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in sample engine; do
  stamp "test $t"
  timeout 120 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "^test .*(FAILED|ok)$|panicked|test result" | head -20
done
stamp synth
timeout 300 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -1
for T in 1.0 0.1 0.02; do
  stamp "sampling T=$T"
  timeout 150 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,8,64 --gen-len 64 --repeat 1 \
    --sample greedy,host,candidates --temperature "$T" --json "$OUT/sample-$T.json" 2>&1 \
    | tee -a "$OUT/sample.log" | grep -E "^prompt|^measured"
done
stamp done
