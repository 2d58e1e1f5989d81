#!/usr/bin/env bash
# Session 25, call 2: session 24's three unmeasured labs in one call (call24_6.sh and call24_7.sh
# cut to what decides a default). The device tests with all three on (bits: ops, engine, golden),
# then the default (U) against FOLD (F: the tile-end fold of fixed width through shared loads),
# HOTNT (HN: the few-row kernels' first stages from one loop), DRY (D: the decode norms' post-wait
# code run once before the wait) and all three (A), interleaved, 3 rounds, batch 1 and 8.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
TF_KERNEL_LAB=HOTNT,FOLD,DRY device_tests ops engine golden
stamp abc
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" OUT=$W/ab timeout 380 bash scripts/device/abc.sh \
  "U=$T F=$T:TF_KERNEL_LAB=FOLD HN=$T:TF_KERNEL_LAB=HOTNT D=$T:TF_KERNEL_LAB=DRY A=$T:TF_KERNEL_LAB=HOTNT,FOLD,DRY" 3 \
  2>&1 | tee $OUT/abc.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
cat $OUT/tests.txt
