#!/usr/bin/env bash
# Session 19, call 5: top-k with one atomic a warp when its columns share a bin, and top-p's
# host fallback sorting once; the tests, then `bench --sample greedy,candidates` for B and A:
# top-k 40 at T = 1, top-p 0.9 at T = 1 (flat rows: the nucleus is past
# the cap, so both go to the host).
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
run() {  # name builds: sampling switches
  local name=$1 builds=$2; shift 2
  for b in $builds; do
    stamp "sampling $name ${b%%=*}"
    timeout 150 "${b#*=}" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1,8,64 --gen-len 64 --repeat 1 \
      --sample greedy,candidates "$@" --json "$OUT/sample-$name-${b%%=*}.json" 2>&1 \
      | tee -a "$OUT/sample.log" | grep -E "^measured|cand"
  done
}
AB="B=.carry/tensorfold A=.carry/a/tensorfold"
run k40 "$AB" --temperature 1.0 --top-k 40
run p90t1 "$AB" --temperature 1.0 --top-p 0.9
stamp done
