#!/usr/bin/env bash
# One device call for a kernel change: the matmul lab (nvcc), the CUDA tests, a speed receipt of
# this build (.carry/tensorfold) against a baseline (.carry/a/tensorfold) on qwen3-8b synth, and
# transformers on the same checkpoint; everything under $OUT as one archive, tables last.
#   RECEIPT_ARGS="--prompt-len 128,4096 --batch 1,8,64 --gen-len 128 --repeat 2"  ROUNDS=2  PEER=1
#   LAB=0 leaves the matmul lab out (no matmul change: saves its nvcc build and run); TESTS=0 the
#   tests (when this build's tests already passed in an earlier call)
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
if [[ ${LAB:-1} == 1 ]]; then
  OUT=$OUT/lab STEPS=lab bash scripts/device/lab.sh > /dev/null 2>&1
  grep -E "FAIL|exactness|TF" "$OUT/lab/lab.log" | grep -v "0 differ (max 0) gemv 0 differ"
fi
if [[ ${TESTS:-1} == 1 ]]; then
  STEPS=tests bash scripts/device/run_all.sh > "$OUT/run_tests.log" 2>&1
  grep -E "^test result|FAILED|panicked" "$OUT/tests.log" | sort | uniq -c
fi
echo "t=$(( $(date +%s) - START )) s: receipt"
ARGS=${RECEIPT_ARGS:-"--prompt-len 128,4096 --batch 1,8,64 --gen-len 128 --repeat 2"} \
  bash scripts/device/receipt.sh .carry/a/tensorfold .carry/tensorfold "${ROUNDS:-2}" > "$OUT/receipt.txt" 2>&1
# Batch 64 before the 4096-token prompt: in sweep-dd6eb62 the 300 s limit cut the last run.
echo "t=$(( $(date +%s) - START )) s: peer"
[[ ${PEER:-1} == 1 ]] && PYTHONUNBUFFERED=1 timeout 300 python3 scripts/device/peer_hf.py --model /tmp/qwen3-8b --runs 128x1,128x64,4096x1 \
  --gen-len 128 --repeat 1 --json "$OUT/peer.json" > "$OUT/peer.log" 2>&1
cp "$OUT/receipt/B-1.json" "$OUT/ours.json" 2>/dev/null
(cd "$OUT" && tar czf sweep.tgz --exclude=sweep.tgz . && find . -type f ! -name sweep.tgz ! -name receipt.txt -delete)
echo "t=$(( $(date +%s) - START )) s"
cat "$OUT/receipt.txt"
tar xzf "$OUT/sweep.tgz" -C /tmp ./ours.json ./peer.json 2>/dev/null
python3 scripts/device/table.py /tmp/ours.json /tmp/peer.json
