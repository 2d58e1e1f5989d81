#!/usr/bin/env bash
# Usage: KERNELS="attention_d128|add_rms_norm" PROMPT=128 SKIP=8 COUNT=4 scripts/device/ncu_kernel.sh
# ncu's detailed sections (speed of light, occupancy, warp stalls, memory) for decode
# instances of the kernels matching KERNELS (a regex), on a 2-layer qwen3-8b-shaped model.
#   WHOLE=1: the bench's one-piece PROMPT-token prefill instead (SKIP=0 COUNT=1: its first instance)
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
BIN=${BIN:-.carry/tensorfold}
PROMPT=${PROMPT:-128}
[[ -f /tmp/qsmall/config.json ]] || timeout 120 "$BIN" synth --like qwen3-8b --layers 2 --out /tmp/qsmall 2>&1 | tail -1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
IDS=$(seq -s, 1 "$PROMPT")
RUN=("$BIN" generate --model /tmp/qsmall --device cuda --ids "$IDS" --max-tokens "${GEN:-8}" --json)
[[ ${WHOLE:-0} == 1 ]] && RUN=("$BIN" bench --model /tmp/qsmall --device cuda --prompt-len "$PROMPT" --batch 1 --gen-len 1 --repeat 1)
timeout 300 "$NCU" --clock-control base --cache-control none -k "regex:${KERNELS:-attention_d128|add_rms_norm}" \
  --launch-skip "${SKIP:-8}" --launch-count "${COUNT:-4}" \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --print-details all --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
  "${RUN[@]}" > "$OUT/ncu_kernel.txt" 2> "$OUT/ncu_kernel.err"
echo "ncu rc=$?"; tail -3 "$OUT/ncu_kernel.err"
grep -E "^  [a-z_0-9]+\(|Duration|Elapsed Cycles|Registers Per|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Memory Throughput|DRAM Throughput|Block Limit|Dynamic Shared|Waves Per SM|Executed Ipc" "$OUT/ncu_kernel.txt" | head -${LINES_OUT:-120}
