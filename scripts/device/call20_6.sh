#!/usr/bin/env bash
# Session 20, call 6: the new defaults (one-row GEMVs on gemv_tma_xr, small decode kernels padded
# to 40 KB of shared memory) against the old (O: TF_LAB_M1=tma-n1, TF_PAD_SMEM=0:) and each alone
# (X0: xr unpadded; N1P: n1 padded). Device tests (ops, engine, golden), the A/B at batch 1 with 3
# interleaved rounds, the bench's figures for the default, N's timeline at 128x1 (work.tgz).
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1 &)
for t in ops engine golden; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a $OUT/tests.log | grep -E "FAILED|panicked|test result" | head -10
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
T=.carry/tensorfold
OUT=$W/dense bash scripts/device/abc.sh "N=$T O=$T:TF_LAB_M1=tma-n1+TF_PAD_SMEM=0: X0=$T:TF_PAD_SMEM=0: N1P=$T:TF_LAB_M1=tma-n1" 3 2>&1 | tee $OUT/abc.txt
stamp bench
timeout 120 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 --gen-len 128 \
  --repeat 2 --json $OUT/bench.json > $OUT/bench.txt 2>&1
stamp trace
OUT=$W VARIANTS="N" timeout 100 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
tail -8 $OUT/bench.txt
cat $OUT/abc.txt
