#!/usr/bin/env bash
# Session 19, call 6: the final sampling kernels (sample_topk with 16 loads in flight). The
# sample, logprob and engine tests, then `bench --sample greedy,candidates` for this build: top-k
# 40 at T = 1, top-p 0.9 at T = 0.1, the plain race at T = 1, top-k 20 with top-p 0.95 at T = 0.6.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
CKPT=${CKPT:-/tmp/qwen3-8b}
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in sample logprob engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-8b --out "$CKPT" > "$OUT/synth.txt" 2>&1; tail -1 "$OUT/synth.txt"
run() {  # name: sampling switches
  local name=$1; shift
  stamp "sampling $name"
  timeout 150 .carry/tensorfold bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,8,64 --gen-len 64 --repeat 1 \
    --sample greedy,candidates "$@" --json "$OUT/sample-$name.json" 2>&1 \
    | tee -a "$OUT/sample.log" | grep -E "^measured|decode" | awk '{print $2, $4, $7, $(NF-5), $(NF-3)}'
}
run k40 --temperature 1.0 --top-k 40
run p90t01 --temperature 0.1 --top-p 0.9
run race --temperature 1.0
run k20p95 --temperature 0.6 --top-k 20 --top-p 0.95
stamp done
