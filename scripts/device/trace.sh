#!/usr/bin/env bash
# Kernel timelines of decode rounds in place (crates/cuda/src/trace.rs): for each variant and
# case, benches the carried binary plainly (round times for reference), then with TF_TRACE on two
# decode rounds, and prints scripts/device/trace_round.py's summary. Cases: PROMPTxBATCH;
# variants: NAME or NAME:ENV=VALUE[+ENV=VALUE...].
#   VARIANTS="F U:TF_LAB_M1=apart" scripts/device/trace.sh [BIN] ["128x1 4096x1 128x8"]
# CKPT picks the checkpoint (qwen3-8b synth by default), LAYER the layer summarised (18).
set -u
BIN=${1:-.carry/tensorfold} CASES=${2:-"128x1 4096x1"}
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/xdg
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for v in ${VARIANTS:-F}; do
  name=${v%%:*} envs=()
  # shellcheck disable=SC2206
  [[ $v == *:* ]] && e=${v#*:} && envs=(${e//+/ })
  for c in $CASES; do
    p=${c%x*} b=${c#*x}
    env "${envs[@]}" timeout 200 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$p" --batch "$b" \
      --gen-len 64 --repeat 2 --json "$OUT/plain_${name}_$c.json" 2>&1 | tail -1
    # Rounds 1-2 are the prefills (repeat 2), then one per decode round (plus a tail prefill per
    # extra sequence when the prompt has a partial block).
    env "${envs[@]}" TF_TRACE=30:31 TF_TRACE_OUT="$OUT/trace_${name}_$c.tsv" timeout 300 "$BIN" bench --model "$CKPT" \
      --device cuda --prompt-len "$p" --batch "$b" --gen-len 64 --repeat 2 2>&1 | tail -2
    python3 scripts/device/trace_round.py "$OUT/trace_${name}_$c.tsv" --layer "${LAYER:-18}" > "$OUT/summary_${name}_$c.txt" 2>&1
    gzip -f "$OUT/trace_${name}_$c.tsv"
  done
done
for v in ${VARIANTS:-F}; do for c in $CASES; do echo "=== ${v%%:*} $c"; sed -n '/^round 1/,$p' "$OUT/summary_${v%%:*}_$c.txt"; done; done
