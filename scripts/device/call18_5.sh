#!/usr/bin/env bash
# Session 18, call 5: why serving at 12 clients ran slower on this build than on the session-16
# build (call 4: 606 against 770 tok/s, T = 1 with logprobs). qwen3-8b synth, 12 clients, 36
# requests of 128 + 64 tokens: A and B at T = 1 with and without logprobs, B without CUDA graphs,
# and both greedy.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1
serve() {  # NAME BINARY [bench_serve switches...]
  local name=$1 bin=$2
  shift 2
  stamp "serve $name $*"
  timeout 120 python3 scripts/bench_serve.py --model /tmp/qwen3-8b --binary "$bin" --concurrency 12 --requests 36 \
    --time-limit 15 --prompt-len 128 --max-tokens 64 --kv-memory 8GiB "$@" --server-args --device cuda 2>&1 \
    | tail -1 | sed "s/^/$name /" | tee -a "$OUT/serve.txt"
}
serve A-lp .carry/a/tensorfold
serve B-lp .carry/tensorfold
TF_CUDA_GRAPHS=0 serve B-lp-nographs .carry/tensorfold
serve A-nolp .carry/a/tensorfold --logprobs -1
serve B-nolp .carry/tensorfold --logprobs -1
serve A-greedy .carry/a/tensorfold --logprobs -1 --temperature 0
serve B-greedy .carry/tensorfold --logprobs -1 --temperature 0
stamp done
