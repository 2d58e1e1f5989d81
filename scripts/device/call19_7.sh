#!/usr/bin/env bash
# Session 19, call 7: serving through the engine with top-k 40 at T = 1 and top-p 0.9 at T = 0.1
# (the synth's flat logits made peaked), B (this build) against A (session 18's), qwen3-8b synth,
# 3, 6 and 12 clients, 36 requests of 128 + 64 tokens, chosen-token logprobs.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1
serve() {  # name binary label: sampling switches
  local name=$1 bin=$2 label=$3; shift 3
  stamp "serve $name $label"
  timeout 100 python3 scripts/bench_serve.py --model /tmp/qwen3-8b --binary "$bin" --logprobs 0 "$@" \
    --concurrency 3,6,12 --requests 36 --time-limit 12 --prompt-len 128 --max-tokens 64 --kv-memory 8GiB \
    --server-args --device cuda > "$OUT/serve-$name-$label.txt" 2>&1
  tail -4 "$OUT/serve-$name-$label.txt"
}
serve B .carry/tensorfold k40 --temperature 1.0 --top-k 40
serve A .carry/a/tensorfold k40 --temperature 1.0 --top-k 40
serve B .carry/tensorfold p90 --temperature 0.1 --top-p 0.9
serve A .carry/a/tensorfold p90 --temperature 0.1 --top-p 0.9
stamp done
