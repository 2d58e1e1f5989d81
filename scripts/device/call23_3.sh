#!/usr/bin/env bash
# Session 23, call 3: the round boundary's copies off the compute stream (held ids to the host on
# `to_host`, a replay's inputs to the device on `to_device`, ordered by events). Session 23's
# call-2 timeline had 16.4 us between one round's argmax and the next round's gather_ids (the ids'
# copy down and the inputs' copy up in between). Device tests (ops, engine: overlapped == waited,
# golden), then B (.carry/a: the build before) against U (this one), interleaved, 4 rounds; the
# timeline of U at 128x1; the Done-when bench and transformers, while time is left.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests ops engine golden
stamp abc
left 100 abc && ARGS="--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 1" OUT=$W/ab timeout 150 bash scripts/device/abc.sh \
  "B=.carry/a/tensorfold U=$T" 4 2>&1 | tee $OUT/abc.txt
stamp trace
left 300 trace && OUT=$W VARIANTS="U" timeout 90 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
stamp bench
left 260 bench && timeout 60 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
stamp peer
left 225 peer && PYTHONUNBUFFERED=1 timeout 220 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64,4096x1 \
  --gen-len 128 --repeat 1 --json $OUT/peer.json > $W/peer.log 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
sed -n '/^round 1/,/^kernel  *wait/p' $W/summary_U_128x1.txt 2>/dev/null | head -20
grep -E "prompt" $OUT/bench.txt | sed 's/^.*txt://'
cat $OUT/tests.txt
[[ -f $OUT/peer.json ]] && python3 scripts/device/table.py $OUT/ours.json $OUT/peer.json
