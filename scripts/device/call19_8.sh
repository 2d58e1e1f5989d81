#!/usr/bin/env bash
# Session 19, call 8: the final code's device tests that touch sampling (sample, logprob, engine, golden):
# host-side changes after call 7 (the host's rule keeps the window for a plain race, greedy
# queries carry no top-k or top-p, one top-p cut shared by the filter and band_prefix).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in sample logprob engine golden; do
  [[ -x ".carry/tests/$t" ]] || continue
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp done
