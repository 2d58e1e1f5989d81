#!/usr/bin/env bash
# Session 24, call 3: where o's late x row loses its 4 us on TPCs where attention or
# qk_norm_rope ran (call 2: ordinary loads are as late, so not the bulk copy). Trace marks after
# lane 0 issued the row's copy (I), after it issued the ring's first stages (J), at the landing
# (X); lab REG (x's address held in a register before the wait) and REG with XWARM.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp trace
OUT=$W VARIANTS="UI:TF_TRACE_MARK=I UJ:TF_TRACE_MARK=J UX:TF_TRACE_MARK=X R:TF_TRACE_MARK=X+TF_KERNEL_LAB=REG RW:TF_TRACE_MARK=X+TF_KERNEL_LAB=REG,XWARM" timeout 330 \
  bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in UI UJ UX R RW; do
  echo "== $v"
  [[ -f $W/trace_${v}_128x1.tsv.gz ]] && (cd scripts/device && python3 o_start.py $W/trace_${v}_128x1.tsv.gz 1)
done | tee $OUT/o_start.txt
grep -h "tok/s\|decode" $W/trace.txt | head -20 | tee $OUT/trace_tail.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
