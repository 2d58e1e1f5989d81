#!/usr/bin/env bash
# Session 22, call 1: overlapped greedy rounds (engine overlap.rs; the bench's default greedy mode
# queues round N + 1 on round N's ids held on the device, `greedy-sync` waits for each round as
# before). The Done-when bench (overlapped), the device tests (ops: held-id rounds equal host-fed
# ones, recorded and op by op; engine: overlapped == waited), the same shapes waited for
# (greedy-sync) for the ratio, transformers, and a timeline of overlapped 128x1 rounds, each step
# only while time is left.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp bench
timeout 150 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
for t in ops engine golden; do
  left 50 "test $t" && stamp "test $t" && timeout 110 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a $W/tests.log \
    | grep -E "FAILED|panicked|test result" | head -5 | tee -a $OUT/tests.txt
done
stamp "sync bench"
left 80 "sync bench" && timeout 120 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8 \
  --gen-len 128 --repeat 2 --sample greedy-sync,greedy --json $OUT/sync.json > $OUT/sync.txt 2>&1
stamp peer
left 230 peer && PYTHONUNBUFFERED=1 timeout 220 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64,4096x1 \
  --gen-len 128 --repeat 1 --json $OUT/peer.json > $W/peer.log 2>&1
if left 60 trace; then
  OUT=$W VARIANTS="O" timeout 100 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
  sed -n '/^round 0/,/^kernel  *wait/p' $W/summary_O_128x1.txt | head -20 > $OUT/trace_rounds.txt
  grep -E "^round" $W/summary_O_128x1.txt >> $OUT/trace_rounds.txt
fi
tar czf "$OUT/work.tgz" -C $W .
stamp done
grep -E "prompt" $OUT/bench.txt $OUT/sync.txt | sed 's/^.*txt://'
cat $OUT/tests.txt
python3 scripts/device/table.py $OUT/ours.json $OUT/peer.json
