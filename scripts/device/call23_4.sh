#!/usr/bin/env bash
# Session 23, call 4: where o's slow blocks lose time. The trace build now marks each TMA GEMV
# block's first tile end; o_tiles.py splits o's blocks (on attention's SMs, their TPC partners,
# qk_norm_rope's SMs and partners, the rest) into first tile and rest, over two rounds' layers.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp trace
OUT=$W VARIANTS="U" timeout 120 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
(cd scripts/device && for k in 0 1 2 3; do python3 o_tiles.py $W/trace_U_128x1.tsv.gz $k; done) | tee $OUT/o_tiles.txt
for l in 5 18 30; do python3 scripts/device/gemv_blocks.py $W/trace_U_128x1.tsv.gz $l 1 | head -40; done > $OUT/o_blocks.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
grep -A14 "layer 18" $W/summary_U_128x1.txt | head -12
