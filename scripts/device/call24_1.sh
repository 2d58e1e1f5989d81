#!/usr/bin/env bash
# Session 24, call 1: the review's TmaStore launcher (ops test) on the GPU, then session 23's
# prepared experiment (call23_6.sh): U (defaults) against XW (TF_KERNEL_LAB=XWARM: each one-row
# GEMV warp loads its x segment before the launch wait), interleaved, then both timelines with
# the trace mark at the x row's landing.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests ops
stamp abc
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" OUT=$W/ab timeout 200 bash scripts/device/abc.sh \
  "U=$T XW=$T:TF_KERNEL_LAB=XWARM" 4 2>&1 | tee $OUT/abc.txt
stamp trace
left 120 trace && OUT=$W VARIANTS="U:TF_TRACE_MARK=X XW:TF_TRACE_MARK=X+TF_KERNEL_LAB=XWARM" timeout 200 \
  bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in U XW; do
  echo "== $v"
  [[ -f $W/trace_${v}_128x1.tsv.gz ]] && (cd scripts/device && python3 o_tiles.py $W/trace_${v}_128x1.tsv.gz 1)
done | tee $OUT/o_tiles.txt
device_tests engine golden
tar czf "$OUT/work.tgz" -C $W .
stamp done
