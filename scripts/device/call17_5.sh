#!/usr/bin/env bash
# Session 17, calls 5-6: decode recordings padded to batch-size buckets (call 6 after the scratch-slot fix). The CUDA tests (ops with the
# padded-recording tests, engine, golden, moe, logprob, sample), then qwen3-8b synth at prompt
# 128: the session start (A, a recording a row count) against this build (B, 3 rows padded to 4,
# 5-7 to 8, 12 to 16), interleaved.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in ops engine golden moe logprob sample; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp abc
ARGS="--prompt-len 128 --batch 1,3,5,12 --gen-len 64 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" 1 2>&1 | tee "$OUT/abc.txt"
stamp done
