#!/usr/bin/env bash
# Session 25, call 3, on the final build (labs FOLD/HOTNT/DRY removed, default PTX unchanged;
# the trace buffer holds a whole 4096-token prefill): the device tests, the Done-when bench and
# transformers at batch 1 and 64 again, then where a warm 4096-token prefill goes in place (all
# 36 layers) and, kernel by kernel, alone (ncu on a 2-layer model).
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests ops engine golden
stamp bench
timeout 70 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
stamp peer
left 200 peer && PYTHONUNBUFFERED=1 timeout 190 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64 \
  --gen-len 128 --repeat 1 --json $OUT/peer.json > $W/peer.log 2>&1
stamp ptrace
left 80 ptrace && TF_TRACE=2:2 TF_TRACE_OUT=$W/ptrace.tsv timeout 75 $T bench --model /tmp/qwen3-8b --device cuda \
  --prompt-len 4096 --batch 1 --gen-len 1 --repeat 2 > $W/ptrace.txt 2>&1 \
  && python3 scripts/device/trace_round.py $W/ptrace.tsv > $OUT/ptrace_summary.txt 2>&1 && gzip -f $W/ptrace.tsv
stamp ncu
left 90 ncu && OUT=$W WHOLE=1 timeout 85 bash scripts/device/profile_prefill.sh > $OUT/ncu_prefill.txt 2>&1
tar czf "$OUT/work.tgz" -C $W --exclude='ptrace.tsv.gz' .
stamp done
head -16 $OUT/ptrace_summary.txt 2>/dev/null
head -14 $OUT/ncu_prefill.txt 2>/dev/null
grep -E "prompt" $OUT/bench.txt | sed 's/^.*txt://'
cat $OUT/tests.txt
[[ -f $OUT/peer.json ]] && python3 scripts/device/table.py $OUT/ours.json $OUT/peer.json
