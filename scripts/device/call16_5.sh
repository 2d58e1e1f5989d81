#!/usr/bin/env bash
# Session 16, call 5: the o projection's L2 prefetch (lab TF_L2_PF_O). Golden and engine tests
# with it on (same bits), then batch-1 decode A/B in one binary: P0 = off, P9 = all of o's
# stages past the ring, P9L = and the last 8 blocks' rings by the first 8, P9D = after 2 us, P4.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in golden engine; do
  TF_L2_PF_O=9:8 timeout 120 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result"
done
B=.carry/tensorfold
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" \
  bash scripts/device/abc.sh "P0=$B P9=$B:TF_L2_PF_O=9 P9L=$B:TF_L2_PF_O=9:8 P9D=$B:TF_L2_PF_O=9:0:2000 P4=$B:TF_L2_PF_O=4" 2 2>&1 | tee "$OUT/abc.txt"
