#!/usr/bin/env bash
# Session 24, call 4: call 3 put o's 4 us on TPCs where attention or qk_norm_rope ran in issuing
# the ring's post-wait stages (mark J), not in the x row's copy (mark I: 0.1 us). Is it an
# instruction fetch (the post-wait issue loop is code the block has not run yet, and those
# kernels' code, 74 KB and 27 KB, evicts what the TPC held)? Lab HOT issues every first stage
# from the one loop that holds the wait. Traces with mark X, then U against H interleaved.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp trace
OUT=$W VARIANTS="UX:TF_TRACE_MARK=X H:TF_TRACE_MARK=X+TF_KERNEL_LAB=HOT" timeout 200 \
  bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in UX H; do
  echo "== $v"
  [[ -f $W/trace_${v}_128x1.tsv.gz ]] && (cd scripts/device && python3 o_start.py $W/trace_${v}_128x1.tsv.gz 1)
done | tee $OUT/o_start.txt
stamp abc
ARGS="--prompt-len 128 --batch 1 --gen-len 128 --repeat 1" OUT=$W/ab timeout 150 bash scripts/device/abc.sh \
  "U=$T H=$T:TF_KERNEL_LAB=HOT" 3 2>&1 | tee $OUT/abc.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
