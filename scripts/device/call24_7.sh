#!/usr/bin/env bash
# Prepared in session 24, not run: lab DRY (rms_norm_j4 / add_rms_norm_j4 run their post-wait
# code once before the launch wait, storing nothing, so the real pass runs instructions already
# fetched on the cold SM the one block lands on; both passes load x through L2 only). Device
# tests under DRY (bits: ops, engine, golden), U against D interleaved, then both timelines'
# per-kernel table (the norms' critical time a call: 4.26 us in session 24's call 4).
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
TF_KERNEL_LAB=DRY device_tests ops engine golden
stamp abc
ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" OUT=$W/ab timeout 220 bash scripts/device/abc.sh \
  "U=$T D=$T:TF_KERNEL_LAB=DRY" 3 2>&1 | tee $OUT/abc.txt
stamp trace
left 100 trace && OUT=$W VARIANTS="U D:TF_KERNEL_LAB=DRY" timeout 200 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in U D; do
  echo "== $v"
  sed -n '/^round 1/,/^kernel  *wait/p' $W/summary_${v}_128x1.txt 2>/dev/null | head -16
done | tee $OUT/summary.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
