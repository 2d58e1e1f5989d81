#!/usr/bin/env bash
# Prepared in session 24, not run: the one-loop first stages beyond call 4's 128x1. The one-row
# default against COLD (session 23's two loops) at 128x1 and 4096x1; the few-row lab HOTNT (the
# x-box kernels' first stages from one loop) against the default at 128x8 and 4096x8, with the
# ops test under HOTNT and FOLD first (bits); FOLD (the tile-end fold of fixed width through
# shared loads) at batch 1; then timelines of the default and HOTNT at 128x8.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
TF_KERNEL_LAB=HOTNT,FOLD device_tests ops
stamp abc1
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" OUT=$W/ab1 timeout 150 bash scripts/device/abc.sh \
  "U=$T C=$T:TF_KERNEL_LAB=COLD F=$T:TF_KERNEL_LAB=FOLD" 3 2>&1 | tee $OUT/abc1.txt
stamp abc8
ARGS="--prompt-len 128,4096 --batch 8 --gen-len 128 --repeat 1" OUT=$W/ab8 timeout 150 bash scripts/device/abc.sh \
  "U=$T HN=$T:TF_KERNEL_LAB=HOTNT" 3 2>&1 | tee $OUT/abc8.txt
stamp trace
left 120 trace && OUT=$W VARIANTS="U HN:TF_KERNEL_LAB=HOTNT" timeout 200 bash scripts/device/trace.sh $T "128x8" > $W/trace.txt 2>&1
for v in U HN; do
  echo "== $v"
  [[ -f $W/trace_${v}_128x8.tsv.gz ]] && (cd scripts/device && for k in 0 1 2 3; do python3 o_start.py $W/trace_${v}_128x8.tsv.gz $k; done)
done | tee $OUT/o_start.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
