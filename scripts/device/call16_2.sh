#!/usr/bin/env bash
# Session 16, call 2: norms folded into their weights (fold.rs). The CUDA tests (fold, ops,
# golden, engine) on the new binary, then batch-1/8 decode A/B/C interleaved: A = the session
# start (.carry/a), U = this build with folding off (TF_CUDA_FOLD=0: the new kernels' unscaled
# path), F = this build (folded). Table last.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt .carry/a/commit.txt | tee "$OUT/commit.txt"
for t in fold ops golden engine; do
  stamp "test $t"
  timeout 240 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "^test .*(FAILED|ok)$|panicked" | head -40
done
stamp abc
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold U=.carry/tensorfold:TF_CUDA_FOLD=0 F=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc.txt"
stamp done
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
