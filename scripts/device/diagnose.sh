#!/usr/bin/env bash
# Usage: scripts/device/diagnose.sh
# Device debugging: op tests, the op-by-op CPU/GPU comparison, the golden tests, and a
# memcheck run of a one-layer qwen3-8b-shaped model (finds the kernel behind an illegal address).
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
for t in ops diagnose golden engine; do
  echo "== $t"
  timeout 150 .carry/tests/$t --test-threads=1 2>&1 | tee -a "$OUT/tests.log" \
    | grep -E "^test |result|drifting|rel err|max \||panicked|assert|differ|copy" | head -40
done
timeout 100 .carry/tensorfold synth --like qwen3-8b --layers 1 --out /tmp/q1 2>&1 | tail -1
IDS=$(seq -s, 1 128)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
timeout 200 "$SAN" --tool memcheck --print-limit 4 .carry/tensorfold generate --model /tmp/q1 --device cuda \
  --ids "$IDS" --max-tokens 3 --json 2>&1 | tee "$OUT/memcheck.log" | grep -v "^\s*$" | head -60
