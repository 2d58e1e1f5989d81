#!/usr/bin/env bash
# Session 15, call 1: the CUDA tests (ops, sample, golden, engine: sampled rounds and verify rows
# now take the device's candidates), then on qwen3-8b synth the sampling modes of `bench --sample`
# (greedy: argmax ids only; host: whole rows downloaded and sampled; candidates: only the
# device's candidates cross) at several temperatures, and the greedy sweep. Tables last.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in sample ops golden engine; do
  stamp "test $t"
  timeout 180 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "^test .*(FAILED|ok)$|panicked" | head -40
done
stamp synth
timeout 300 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -1
for cfg in "1.0 1.0" "0.1 1.0" "0.02 1.0" "0.02 0.9"; do
  set -- $cfg
  stamp "sampling T=$1 top_p=$2"
  timeout 150 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,64 --gen-len 64 --repeat 1 \
    --sample greedy,host,candidates --temperature "$1" --top-p "$2" --json "$OUT/sample-$1-$2.json" 2>&1 \
    | tee -a "$OUT/sample.log" | grep -E "^prompt|^measured"
done
stamp "greedy sweep"
timeout 240 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128,4096 --batch 1,8,64 --gen-len 128 --repeat 2 \
  --json "$OUT/ours.json" 2>&1 | tee "$OUT/bench.log" | grep -E "^prompt|^measured"
stamp done
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
python3 scripts/device/table.py "$OUT/ours.json"
