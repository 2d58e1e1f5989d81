#!/usr/bin/env bash
# Prepared in session 24, not run (its device time was spent; a start was refused): the
# Done-when call for the one-loop first stages now the one-row GEMV's default (its PTX is that
# of call 4's lab HOT). Device tests (engine, golden, ops), the Done-when bench of ours, then
# transformers on the same checkpoint (batch 1 and 64) and the table of ours/theirs.
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests engine golden ops
stamp bench
timeout 70 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
stamp peer
left 225 peer && PYTHONUNBUFFERED=1 timeout 220 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64,4096x1 \
  --gen-len 128 --repeat 1 --json $OUT/peer.json > $W/peer.log 2>&1
# Where a 4096-token prefill's time goes in place (its MFU sits at the 0.60 bar): the second
# prefill of two (warm), recorded by the trace build, summed by kernel.
stamp ptrace
left 90 ptrace && TF_TRACE=2:2 TF_TRACE_OUT=$W/ptrace.tsv timeout 80 $T bench --model /tmp/qwen3-8b --device cuda \
  --prompt-len 4096 --batch 1 --gen-len 1 --repeat 2 > $W/ptrace.txt 2>&1 \
  && python3 scripts/device/trace_round.py $W/ptrace.tsv > $OUT/ptrace_summary.txt 2>&1 && gzip -f $W/ptrace.tsv
tar czf "$OUT/work.tgz" -C $W .
stamp done
head -40 $OUT/ptrace_summary.txt 2>/dev/null
grep -E "prompt" $OUT/bench.txt | sed 's/^.*txt://'
cat $OUT/tests.txt
[[ -f $OUT/peer.json ]] && python3 scripts/device/table.py $OUT/ours.json $OUT/peer.json
