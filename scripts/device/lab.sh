#!/usr/bin/env bash
# Device call: builds scripts/device/gemm_lab.cu with the machine's nvcc (sm_90a) and runs it
# (matmul exactness across kernels, prefill GEMM TFLOP/s against cuBLAS, GEMV bandwidth); then,
# when STEPS has "profile", the decode and prefill kernel profiles of scripts/device/profile*.sh.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
STEPS=${STEPS:-lab}
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [[ $STEPS == *lab* ]]; then
  "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I crates/cuda/kernels \
    ${LABFLAGS:-} -o /tmp/gemm_lab scripts/device/gemm_lab.cu -lcublas -lcuda 2> "$OUT/lab_build.log"
  echo "nvcc rc=$?"; grep -A1 -E "gemm_wgmma|gemm_bf16'" "$OUT/lab_build.log" | grep -E "registers|spill" | head -4
  grep -E "error" "$OUT/lab_build.log" | head -20
  timeout 240 /tmp/gemm_lab 2>&1 | tee "$OUT/lab.log"
fi
if [[ $STEPS == *profile* ]]; then
  bash scripts/device/profile.sh 2>&1 | tail -40
  bash scripts/device/profile_prefill.sh 2>&1 | tail -20
fi
