#!/usr/bin/env bash
# Session 17, call 3: MoE routing a warp a row, gate and up in one grouped launch. The CUDA tests
# (moe, engine, golden, ops), qwen3-30b-a3b synth cut to 12 layers: the session start (A)
# against this build (B) interleaved, then B's kernel timeline at 128x1 (layer 6).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in moe engine golden ops; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-30b-a3b --layers 12 --out /tmp/moe 2>&1 | tail -1
stamp abc
CKPT=/tmp/moe ARGS="--prompt-len 128,2048 --batch 1,8,64 --gen-len 32 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc.txt"
stamp trace
CKPT=/tmp/moe LAYER=6 bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
sed -n '/^round 1/,$p' "$OUT/summary_F_128x1.txt" | head -60
stamp done
