#!/usr/bin/env bash
# Session 22, call 4: the ops test whose count assertion was wrong in call 3 (it asked 81 replays
# of 70 rounds at three rows; the bits matched), then a timeline of overlapped 128x1 rounds.
set -u
. scripts/device/call_env.sh
timeout 100 .carry/tests/ops --test-threads=1 2>&1 | grep -E "FAILED|panicked|test result|rows" | tee $OUT/tests.txt
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
OUT=$W VARIANTS="O" timeout 120 bash scripts/device/trace.sh .carry/tensorfold "128x1" > $W/trace.txt 2>&1
grep -E "^round" $W/summary_O_128x1.txt | tee $OUT/trace_rounds.txt
cp $W/summary_O_128x1.txt $OUT/ 2>/dev/null
