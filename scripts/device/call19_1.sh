#!/usr/bin/env bash
# Session 19, call 1: candidates chosen by the Gumbel race on the device (a plain race keeps the
# ids within the race margin of its best score, so a flat row at T = 1 no longer falls back to
# the host). The sample, logprob and engine tests, then `bench --sample` at T = 1 and 0.7 for
# B (this build) and A (.carry/a, session 18's), batch 1, 8, 64.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in sample logprob engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-8b --out "$CKPT" > "$OUT/synth.txt" 2>&1; tail -1 "$OUT/synth.txt"
for T in 1.0 0.7; do
  for b in B=.carry/tensorfold A=.carry/a/tensorfold; do
    stamp "sampling T=$T ${b%%=*}"
    timeout 150 "${b#*=}" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,8,64 --gen-len 64 --repeat 1 \
      --sample greedy,candidates --temperature "$T" --json "$OUT/sample-$T-${b%%=*}.json" 2>&1 \
      | tee -a "$OUT/sample.log" | grep -E "^prompt|^measured|cand"
  done
done
stamp done
