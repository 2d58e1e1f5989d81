#!/usr/bin/env bash
# Session 18, call 1: the one-row TMA GEMV with the x row held in shared memory (gemv_tma_xr,
# W-only rings of 11 stages) against gemv_tma_n1 (x box a stage). The read-only bandwidth
# ceiling (read_lab.cu), the ops and engine tests, A (session-16 build) / B (gemv_tma_xr) /
# N1 (this build with TF_LAB_M1=tma-n1) at batch 1, and B's and N1's timelines at 128x1.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
stamp read_lab
"$NVCC" -O3 -arch=sm_90a scripts/device/read_lab.cu -o /tmp/read_lab 2>&1 | tail -3 && /tmp/read_lab | tee "$OUT/read_lab.txt"
(timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1 &)
for t in ops engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
OUT=$OUT/dense bash scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold N1=.carry/tensorfold:TF_LAB_M1=tma-n1" 2 2>&1 | tee "$OUT/abc.txt"
stamp trace
VARIANTS="B N1:TF_LAB_M1=tma-n1" bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
for v in B N1; do echo "== $v"; sed -n '/^round 1/,$p' "$OUT/summary_${v}_128x1.txt" | sed -n '1,22p;/layer 18/,$p'; done
stamp done
