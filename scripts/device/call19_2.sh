#!/usr/bin/env bash
# Session 19, call 2: serving at T = 1 (the OpenAI default) and 0.7 with the race's candidates
# (B, this build) against session 18's build (A: a flat row at T = 1 falls back to whole rows),
# qwen3-8b synth, 3, 6 and 12 clients, 36 requests of 128 + 64 tokens, chosen-token logprobs;
# then B greedy for the inter-token latency of the same serving loop without sampling.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1
serve() {  # name binary temperature
  stamp "serve $1 T=$3"
  timeout 170 python3 scripts/bench_serve.py --model /tmp/qwen3-8b --binary "$2" --temperature "$3" --logprobs 0 \
    --concurrency 3,6,12 --requests 36 --time-limit 15 --prompt-len 128 --max-tokens 64 --kv-memory 8GiB \
    --server-args --device cuda > "$OUT/serve-$1-$3.txt" 2>&1
  tail -5 "$OUT/serve-$1-$3.txt"
}
serve B .carry/tensorfold 1.0
serve A .carry/a/tensorfold 1.0
serve B .carry/tensorfold 0.7
serve A .carry/a/tensorfold 0.7
serve B .carry/tensorfold 0
stamp done
