#!/usr/bin/env bash
# Session 17, call 1: logprobs on the device. The CUDA tests (logprob, sample, engine with the
# raw-row logprobs check, golden, ops), then decode rounds that sample every row with and without
# top-5 logprobs: from downloaded rows (host-logprobs, the engine's path before) or from the
# backend (logprobs), qwen3-8b synth, prompt 128, batch 1 / 8 / 64.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in logprob sample engine golden ops; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -1
stamp bench
timeout 240 "$BIN" bench --model "$CKPT" --device cuda --batch 1,8,64 --prompt-len 128 --gen-len 64 --repeat 2 \
  --sample greedy,candidates,host-logprobs,logprobs --temperature 0.1 --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt" \
  | grep -E "measured|decode"
stamp done
