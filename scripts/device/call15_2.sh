#!/usr/bin/env bash
# Session 15, call 2: on qwen3-8b synth, the sampling modes of `bench --sample` again (the host's
# draw time a round now printed), then the greedy sweep and transformers on the same checkpoint
# in the same call (issue #5's table). Tables last.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=.carry/tensorfold CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
stamp synth
timeout 300 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -1
for T in 1.0 0.1 0.02; do
  stamp "sampling T=$T"
  timeout 150 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,8,64 --gen-len 64 --repeat 1 \
    --sample greedy,host,candidates --temperature "$T" --json "$OUT/sample-$T.json" 2>&1 \
    | tee -a "$OUT/sample.log" | grep -E "^prompt|^measured"
done
stamp "greedy sweep"
timeout 240 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128,4096 --batch 1,8,64 --gen-len 128 --repeat 2 \
  --json "$OUT/ours.json" 2>&1 | tee "$OUT/bench.log" | grep -E "^prompt|^measured"
stamp peer
PYTHONUNBUFFERED=1 timeout 330 python3 scripts/device/peer_hf.py --model "$CKPT" --runs 128x1,4096x1,128x64 \
  --gen-len 128 --repeat 1 --json "$OUT/peer.json" 2>&1 | grep -v Warning | tee "$OUT/peer.log" | tail -6
stamp done
python3 scripts/device/table.py "$OUT/ours.json" "$OUT/peer.json"
