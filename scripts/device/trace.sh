#!/usr/bin/env bash
# Usage (on the GPU machine, after scripts/device/build.sh here):
#   VARIANTS="F M:--trace-mark=X" scripts/device/trace.sh [BIN] ["128x1 4096x1 128x8"]
# Kernel timelines of decode rounds in place (crates/cuda/src/trace.rs): for each variant and
# case (PROMPTxBATCH), benches the binary plainly (round times for reference), then with
# `--trace 30:31` (two decode rounds), and prints scripts/device/trace_round.py's summary. A variant
# is NAME or NAME:FLAG[+FLAG...], extra flags of both runs. CKPT picks the checkpoint
# (qwen3-8b synth by default), LAYER the layer summarised (18).
set -u
BIN=${1:-.carry/tensorfold} CASES=${2:-"128x1 4096x1"}
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/xdg
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for v in ${VARIANTS:-F}; do
  name=${v%%:*} flags=()
  # shellcheck disable=SC2206
  [[ $v == *:* ]] && e=${v#*:} && flags=(${e//+/ })
  for c in $CASES; do
    p=${c%x*} b=${c#*x}
    timeout 200 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$p" --batch "$b" \
      --gen-len 64 --repeat 2 --json "$OUT/plain_${name}_$c.json" "${flags[@]}" 2>&1 | tail -1
    # Rounds 1-2 are the prefills (repeat 2), then one per decode round (plus a tail prefill per
    # extra sequence when the prompt has a partial block).
    timeout 300 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$p" --batch "$b" --gen-len 64 --repeat 2 \
      --trace 30:31 --trace-out "$OUT/trace_${name}_$c.tsv" "${flags[@]}" 2>&1 | tail -2
    python3 scripts/device/trace_round.py "$OUT/trace_${name}_$c.tsv" --layer "${LAYER:-18}" > "$OUT/summary_${name}_$c.txt" 2>&1
    gzip -f "$OUT/trace_${name}_$c.tsv"
  done
done
for v in ${VARIANTS:-F}; do for c in $CASES; do echo "=== ${v%%:*} $c"; sed -n '/^round 1/,$p' "$OUT/summary_${v%%:*}_$c.txt"; done; done
