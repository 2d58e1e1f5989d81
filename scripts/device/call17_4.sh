#!/usr/bin/env bash
# Session 17, call 4: the grouped GEMV packing tiles by segments, combine over column blocks. The
# CUDA tests (moe, engine, golden, ops, logprob), qwen3-30b-a3b synth cut to 12 layers (A = the
# session start against B), B's timeline at 128x1 (layer 6), then the dense qwen3-8b A/B at
# batch 1 (its decode code is unchanged: a check that nothing moved).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in moe engine golden ops logprob; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-30b-a3b --layers 12 --out /tmp/moe 2>&1 | tail -1
stamp abc-moe
CKPT=/tmp/moe ARGS="--prompt-len 128,2048 --batch 1,8,64 --gen-len 32 --repeat 1" OUT=$OUT/moe \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc-moe.txt"
stamp trace
CKPT=/tmp/moe LAYER=6 bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
sed -n '/^round 1/,$p' "$OUT/summary_F_128x1.txt" | sed -n '1,24p;/layer 6/,$p'
rm -rf /tmp/moe
stamp abc-dense
OUT=$OUT/dense bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc-dense.txt"
stamp done
