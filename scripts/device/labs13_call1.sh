#!/usr/bin/env bash
# Session 13, call 1: the instruction-fetch lab, the dependency lab with CUDA graphs, then the
# CUDA tests and a short A/B of this build against .carry/a (no timeline).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
nvcc -O3 -arch=sm_90a scripts/device/icache_lab.cu -o /tmp/icache_lab && timeout 120 /tmp/icache_lab > "$OUT/icache.txt" 2>&1
nvcc -O3 -arch=sm_90a scripts/device/sync_lab.cu -o /tmp/sync_lab -lcuda && timeout 120 /tmp/sync_lab > "$OUT/sync.txt" 2>&1
CASES=none ROUNDS=${ROUNDS:-2} bash scripts/device/decode_check.sh > "$OUT/check.txt" 2>&1
rm -rf "$OUT/abc" "$OUT"/plain_*.json
cat "$OUT/icache.txt" "$OUT/sync.txt" "$OUT/check.txt"
