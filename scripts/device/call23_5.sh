#!/usr/bin/env bash
# Session 23, call 5. Call 4: o's blocks on attention's or qk_norm_rope's TPCs take 8.0 us from
# the launch wait to their first tile's end against 3.55 for the rest; their second tile is
# near normal (3.2 against 2.4). Where in the first tile: the mark moved (TF_TRACE_MARK, trace
# builds only) to the x row's landing (X), the first W stage's (S0), the tile's last stage's (SL).
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp trace
OUT=$W VARIANTS="X:TF_TRACE_MARK=X S0:TF_TRACE_MARK=S0 SL:TF_TRACE_MARK=SL" timeout 200 bash scripts/device/trace.sh $T "128x1" \
  > $W/trace.txt 2>&1
for v in X S0 SL; do
  echo "== mark $v"
  (cd scripts/device && python3 o_tiles.py $W/trace_${v}_128x1.tsv.gz 1)
done | tee $OUT/o_tiles.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
