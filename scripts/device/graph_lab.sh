#!/usr/bin/env bash
# Device call for the CUDA-graph lab (crates/cuda/src/graph_lab.rs): for each case, one bench
# process captures decode round K into a graph and replays it N times; prints the replay times
# beside the bench's own round time for the same shape (kernels launched one by one).
#   CASES="128x1 4096x1 128x8" LAB=20:50 scripts/device/graph_lab.sh
set -u
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
BIN=${BIN:-.carry/tensorfold}
mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/xdg TF_CUDA_CACHE=/tmp/tf-cuda-cache
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for c in ${CASES:-128x1 4096x1 128x8}; do
  p=${c%x*} b=${c#*x}
  for lab in "" "${LAB:-20:50}"; do
    tag=$c-off && [[ -n $lab ]] && tag=$c-on
    TF_LAB_GRAPH=$lab timeout 200 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$p" --batch "$b" \
      --gen-len 64 --repeat 1 --json "$OUT/g-$tag.json" > "$OUT/g-$tag.txt" 2>&1 || echo "$c ${lab:-off} failed"
    python3 - "$OUT/g-$tag.json" "$c" "${lab:-off}" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    print(f"{sys.argv[2]:>7} lab {sys.argv[3]:>6}: decode {r['decode_tok_s']:.1f} tok/s, {1e6 * r['batch'] / r['decode_tok_s']:.1f} us a round")
except Exception as e:
    print(sys.argv[2], sys.argv[3], "no json:", e)
PY
    grep -h "graph lab" "$OUT/g-$tag.txt"
  done
done
