#!/usr/bin/env bash
# Session 23, call 2. Call 1: the GLU store gains at 128x8 (1.015), 4096x8 (1.018) and 4096x1
# (1.009) but loses at 128x1 (234.0 against 235.9 tok/s, 3 rounds, spread 0.1%). Batch 1 again,
# 5 rounds, interleaved: U (defaults), A (TF_LAB_M1=glu-apart), and U with down's pre-wait W
# stages at 10 (D10) and 3 (D3): down now follows gate_up with no kernel between. Then the
# timelines of U and A at 128x1.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp abc
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" OUT=$W/ab timeout 250 bash scripts/device/abc.sh \
  "U=$T A=$T:TF_LAB_M1=glu-apart D10=$T:TF_GEMV_TUNE=256x768:p10 D3=$T:TF_GEMV_TUNE=256x768:p3" 5 2>&1 | tee $OUT/abc.txt
stamp trace
left 120 trace && OUT=$W VARIANTS="U A:TF_LAB_M1=glu-apart" timeout 200 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
cat $W/trace.txt | grep -v "^$" | head -80
