#!/usr/bin/env bash
# Session 24, call 5 (the last of the session's device time): the one-loop first stages as the
# one-row GEMV's default; device tests engine, golden (then ops while time is left) and the
# Done-when bench of ours (no transformers run: its ~220 s did not fit).
set -u
LIMIT=${LIMIT:-150}
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
device_tests engine golden
stamp bench
timeout 70 $T bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 \
  --gen-len 128 --repeat 2 --json $OUT/ours.json > $OUT/bench.txt 2>&1
tail -12 $OUT/bench.txt
LIMIT=$((LIMIT + 60)) device_tests ops
stamp done
