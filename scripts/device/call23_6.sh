#!/usr/bin/env bash
# Prepared in session 23, not run (its device time was spent): the x row's translation warmed
# before the launch wait (TF_KERNEL_LAB=XWARM, gemv_tma.cu; the default build's PTX unchanged).
# Calls 4-5: o's blocks in TPCs where attention or qk_norm_rope had just run got their x row
# (attention's output, one bulk copy a warp) 4.8 us after the wait, against 0.8 elsewhere; the W
# stages were fine. If the cause is the address translation (those kernels touch other pages),
# a load before the wait hides it. One binary, interleaved, 4 rounds: U (defaults) against XW;
# then the timelines of both with the mark at the x row's landing (o_tiles.py: "tile 1" is then
# the x row's latency).
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
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
tar czf "$OUT/work.tgz" -C $W .
stamp done
