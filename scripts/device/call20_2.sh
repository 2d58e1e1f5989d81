#!/usr/bin/env bash
# Session 20, call 2: the paired one-row GEMV (kernels/gemv_pair.cu: o + norm + gate/up, down +
# norm + q/k/v in one launch each). Device tests (ops: pairs against two launches, the matmul and
# recording cases; engine; golden), then B (pairs on, the default) against U (TF_GEMV_PAIR=0) at
# batch 1, interleaved, and B's timeline at 128x1. Everything under $OUT/work.tgz.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1 &)
stamp "test ops (pairs, matmul_add, recordings)"
timeout 150 .carry/tests/ops --test-threads=1 paired matmul_add recorded rounds_ norm_in 2>&1 | tee $W/tests.log | grep -E "^test |FAILED|panicked|test result" | head -20
if ! grep -q "test result: ok" $W/tests.log; then tar czf "$OUT/work.tgz" -C $W .; echo "ops failed: stopping"; exit 1; fi
for t in engine golden; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a $W/tests.log | grep -E "FAILED|panicked|test result" | head -10
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
OUT=$W/dense bash scripts/device/abc.sh "B=.carry/tensorfold U=.carry/tensorfold:TF_GEMV_PAIR=0" 3 2>&1 | tee $W/abc.txt
stamp trace
OUT=$W VARIANTS="B" timeout 200 bash scripts/device/trace.sh .carry/tensorfold "128x1" > $W/trace.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
sed -n '/^round 1/,$p' $W/summary_B_128x1.txt | sed -n '1,24p;/layer 18/,$p'
stamp done
cat $W/abc.txt
