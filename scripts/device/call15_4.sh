#!/usr/bin/env bash
# Session 15, call 4: the final commit's CUDA tests (sample, ops, golden, engine), then transformers
# at prompt 128 batch 64 again (call 2 read 659.9 tok/s there, against about 4390 in sessions 13-14).
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
  timeout 120 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -1
stamp peer
PYTHONUNBUFFERED=1 timeout 200 python3 scripts/device/peer_hf.py --model "$CKPT" --runs 128x64 \
  --gen-len 128 --repeat 2 --json "$OUT/peer.json" 2>&1 | grep -E "^peer" | tee "$OUT/peer.log"
python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)'
stamp done
