#!/usr/bin/env bash
# Session 20, call 5: the final code (session 19's plus the lab knobs TF_GEMV_TUNE, TF_PDL_OFF and
# TF_PAD_SMEM, off by default): every CUDA test binary; small kernels padded in shared memory so
# their early-launched blocks wait for a GEMV block to leave instead of sharing its SM (P: q/k
# norm + RoPE, the decode norm and the gated activation; PQ, PG: the first or the last alone; XP:
# with lab tma-xr) against U, interleaved at batch 1; then the bench's figures on qwen3-8b synth
# (prompt 128 and 4096, batch 1 / 8 / 64, gen 128, repeat 2) with its copy bandwidth and GEMM peak.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1 &)
for t in ops sample logprob engine golden moe; do
  stamp "test $t"
  timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a $OUT/tests.log | grep -E "FAILED|panicked|test result" | head -10
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
T=.carry/tensorfold P=TF_PAD_SMEM=40960:qk_norm_rope,rms_norm_j4,glu_packed
OUT=$W/dense bash scripts/device/abc.sh "U=$T P=$T:$P PQ=$T:TF_PAD_SMEM=40960:qk_norm_rope PG=$T:TF_PAD_SMEM=40960:glu_packed XP=$T:$P+TF_LAB_M1=tma-xr" 2 2>&1 | tee $OUT/abc.txt
stamp bench
timeout 240 .carry/tensorfold bench --model /tmp/qwen3-8b --device cuda --prompt-len 128,4096 --batch 1,8,64 --gen-len 128 \
  --repeat 2 --json $OUT/bench.json > $OUT/bench.txt 2>&1
stamp done
tail -25 $OUT/bench.txt
cat $OUT/abc.txt
