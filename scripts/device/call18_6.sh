#!/usr/bin/env bash
# Session 18, call 6: call 4's serving levels again (3, 6, 12 clients in one server) with each
# CUDA graph capture's outcome logged (TF_GRAPH_LOG=1), B then A.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1
for b in B=.carry/tensorfold A=.carry/a/tensorfold; do
  stamp "serve ${b%%=*}"
  TF_GRAPH_LOG=1 timeout 150 python3 scripts/bench_serve.py --model /tmp/qwen3-8b --binary "${b#*=}" \
    --concurrency 3,6,12 --requests 36 --time-limit 15 --prompt-len 128 --max-tokens 64 --kv-memory 8GiB \
    --server-args --device cuda > "$OUT/serve-${b%%=*}.txt" 2> "$OUT/graph-${b%%=*}.log"
  tail -4 "$OUT/serve-${b%%=*}.txt"
  sort "$OUT/graph-${b%%=*}.log" | uniq -c | sort -rn | head -12
done
stamp done
