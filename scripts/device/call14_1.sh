#!/usr/bin/env bash
# Session 14, call 1: the device tests on the carried build, then where the vocabulary head's
# slowdown in a process with graphs starts: timelines of the first decode rounds (run op by op,
# captured, replayed) with graphs on and off, the head's per-round time printed last.
# As run, TF_TRACE=1:8 recorded nothing useful: round 1 holds the load's pad kernels, which
# filled the trace buffer; call14_2.sh traces rounds 3-7 instead.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold CKPT=/tmp/qwen3-8b
cat .carry/commit.txt
for t in ops golden engine; do
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | grep -E "^test result|FAILED|panicked" | sed "s/^/$t: /" | tee -a "$OUT/tests.txt"
done
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for v in on:1 off:0; do
  name=${v%%:*}
  TF_CUDA_GRAPHS=${v#*:} TF_TRACE=1:8 TF_TRACE_OUT="$OUT/trace_$name.tsv" timeout 300 "$BIN" bench --model "$CKPT" \
    --device cuda --prompt-len 128 --batch 1 --gen-len 64 --repeat 2 2>&1 | tail -1
  python3 scripts/device/trace_round.py "$OUT/trace_$name.tsv" > "$OUT/summary_$name.txt" 2>&1
  gzip -f "$OUT/trace_$name.tsv"
done
for name in on off; do
  echo "== graphs $name: per round (launches, us), head and argmax per call"
  grep -E "^round|gemv_tma_n1:head  |argmax_rows  " "$OUT/summary_$name.txt" | awk '/^round/{printf "\n%s", $0; next}{printf "  | %s %s", $1, $4}'
  echo
done
cat "$OUT/tests.txt"
