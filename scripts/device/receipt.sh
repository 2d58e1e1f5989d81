#!/usr/bin/env bash
# Usage: scripts/device/receipt.sh .carry/a/tensorfold .carry/b/tensorfold [rounds]   (ARGS: bench flags)
#   CKPT=/tmp/qwen3-30b-a3b-12 LIKE=qwen3-30b-a3b:12 receipt.sh ...: the checkpoint, and what to
#   synthesize there if it is missing (default qwen3-8b)
#   A_FLAGS / B_FLAGS: flags for one side only, so one build can be its own baseline, e.g.
#   A_FLAGS="--cuda-moe-gemm per-expert" B_FLAGS="--cuda-moe-gemm grouped" receipt.sh BIN BIN
# Speed receipt for a change: benches two builds interleaved (A B A B ...) in one call on the same
# checkpoint and GPU, then prints each figure's median for both and the ratio B/A.
# Build each here with scripts/device/build.sh (copy .carry/tensorfold to .carry/a, .carry/b).
set -u
A=$1 B=$2 ROUNDS=${3:-3}
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
ARGS=${ARGS:-"--prompt-len 128,4096 --batch 1,64 --gen-len 128 --repeat 3"}
mkdir -p "$OUT/receipt"
export XDG_CACHE_HOME=/tmp/xdg
# A missing CKPT is synthesized like LIKE (preset[:layers], default qwen3-8b): name the preset
# of the checkpoint CKPT stands for, or an MoE receipt measures a dense model.
IFS=: read -r LIKE_PRESET LIKE_LAYERS <<< "${LIKE:-qwen3-8b}"
[[ -f $CKPT/config.json ]] || timeout 400 "$A" synth --like "$LIKE_PRESET" ${LIKE_LAYERS:+--layers "$LIKE_LAYERS"} \
  --out "$CKPT" | tail -1
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A flags=${A_FLAGS:-}; [[ $side == B ]] && bin=$B flags=${B_FLAGS:-}
    # shellcheck disable=SC2086
    timeout 300 "$bin" bench --model "$CKPT" --device cuda $ARGS $flags --json "$OUT/receipt/$side-$r.json" >/dev/null 2>&1 \
      || echo "$side round $r failed"
  done
done
python3 - "$OUT/receipt" <<'PY'
import glob, json, statistics, sys
d = sys.argv[1]
runs = {s: [json.load(open(f)) for f in sorted(glob.glob(f"{d}/{s}-*.json"))] for s in "AB"}
keys = ["prefill_tok_s", "prefill_mfu", "decode_tok_s", "decode_roofline_ratio", "decode_host_ms"]
print(f"{'prompt':>6} {'batch':>5} {'figure':>22} {'A':>10} {'B':>10} {'B/A':>7} {'A spread':>9}")
for i, r in enumerate(runs["A"][0]["results"] if runs["A"] else []):
    for k in keys:
        a = [x["results"][i].get(k, float("nan")) for x in runs["A"]]
        b = [x["results"][i].get(k, float("nan")) for x in runs["B"]]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        spread = (max(a) - min(a)) / ma if ma else float("nan")
        print(f"{r['prompt_len']:>6} {r['batch']:>5} {k:>22} {ma:>10.3f} {mb:>10.3f} {mb / ma:>7.3f} {spread:>9.3f}")
PY
