#!/usr/bin/env bash
# Session 23, call 1: the gated activation in the TMA GEMV's store (gemv_tma_xr_glu at one row,
# gemv_tma_glu_n* up to 32 rows), so decode rounds of up to 32 rows run no glu_packed launch.
# Device tests first (ops: packed gate/up on every path equals glu of two matmuls; engine;
# golden), then U (defaults) against A (TF_LAB_M1=glu-apart: the product, then glu_packed) in
# one binary, interleaved, 3 rounds; then the Done-when bench and transformers, while time is left.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests ops engine golden
stamp abc
left 150 abc && ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 64 --repeat 1" OUT=$W/ab \
  timeout 170 bash scripts/device/abc.sh "U=$T A=$T:TF_LAB_M1=glu-apart" 3 2>&1 | tee $OUT/abc.txt
stamp bench
left 100 bench && timeout 150 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
stamp peer
left 230 peer && PYTHONUNBUFFERED=1 timeout 220 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64,4096x1 \
  --gen-len 128 --repeat 1 --json $OUT/peer.json > $W/peer.log 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
grep -E "prompt" $OUT/bench.txt | sed 's/^.*txt://'
cat $OUT/tests.txt
[[ -f $OUT/peer.json ]] && python3 scripts/device/table.py $OUT/ours.json $OUT/peer.json
