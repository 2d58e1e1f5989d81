#!/usr/bin/env bash
# Session 19, call 4: top-p candidates settled by the device's window mass, and top-k's radix
# selection with one atomic per warp and bin. The sample, logprob and engine tests, then
# `bench --sample greedy,candidates` for B (this build) and A (.carry/a, session 18's): top-p
# 0.9 at T = 0.1 and 0.95 at T = 0.05 (the synth's logits are flat, so low temperatures stand
# in for a real model's peaked rows), top-k 40 at T = 1, and top-p 0.9 at T = 1 (flat: the
# nucleus is most of the vocabulary, past the cap, so both go to the host).
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
run p90t01 "$AB" --temperature 0.1 --top-p 0.9
run p95t005 "$AB" --temperature 0.05 --top-p 0.95
run k40 "B=.carry/tensorfold" --temperature 1.0 --top-k 40
run p90t1 "B=.carry/tensorfold" --temperature 1.0 --top-p 0.9
stamp done
