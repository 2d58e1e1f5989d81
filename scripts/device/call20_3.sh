#!/usr/bin/env bash
# Session 20, call 3: where the paired GEMV's time goes. Timings of B (pairs), U (TF_GEMV_PAIR=0),
# and lab variants (TF_PAIR_LAB: 4 no grid wait, 8 no norm, 12 neither; wrong results), then
# timelines with the mark after the norm (1) and at phase A's end (2). All under $OUT/work.tgz.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp abc
T=.carry/tensorfold
ARGS="--prompt-len 128 --batch 1 --gen-len 64 --repeat 1" OUT=$W/dense bash scripts/device/abc.sh \
  "B=$T U=$T:TF_GEMV_PAIR=0 L4=$T:TF_PAIR_LAB=4 L8=$T:TF_PAIR_LAB=8 L12=$T:TF_PAIR_LAB=12 P3=$T:TF_GEMV_PRE=3" 2 2>&1 | tee $W/abc.txt
stamp trace
OUT=$W VARIANTS="M1:TF_PAIR_LAB=1 M2:TF_PAIR_LAB=2" timeout 200 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
cat $W/abc.txt
