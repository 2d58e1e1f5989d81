#!/usr/bin/env bash
# Session 16, call 3: the TMA GEMV's epilogues as template kernels. fold and ops tests, the
# A/U/F decode A/B (A = session start, U = folding off, F = folded), then F's timeline at 128x1.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in fold ops; do
  stamp "test $t"
  timeout 240 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked" | head -20
done
stamp abc
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold U=.carry/tensorfold:TF_CUDA_FOLD=0 F=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc.txt"
stamp trace
VARIANTS="F" bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
sed -n '/^round 1/,/layer 18/p' "$OUT/summary_F_128x1.txt" | head -30
sed -n '/^round 1/,$p' "$OUT/summary_F_128x1.txt" | sed -n '/layer 18/,+12p'
stamp done
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
cat "$OUT/abc.txt" | tail -13
