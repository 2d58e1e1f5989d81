#!/usr/bin/env bash
# Session 17, call 2: MoE on the device. The CUDA tests (moe, logprob, ops, engine, golden,
# sample), then decode and prefill of qwen3-30b-a3b synth cut to 12 layers, the session start's
# binary (A: host routing, every MoE round op by op) against this one (B), interleaved.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
for t in moe logprob ops engine golden sample; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-30b-a3b --layers 12 --out /tmp/moe 2>&1 | tail -1
stamp abc
CKPT=/tmp/moe ARGS="--prompt-len 128,2048 --batch 1,8,64 --gen-len 32 --repeat 1" \
  bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc.txt"
cp -r "${OUT}/abc" "$OUT/abc-json" 2>/dev/null
stamp done
