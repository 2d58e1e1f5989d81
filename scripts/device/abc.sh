#!/usr/bin/env bash
# Decode and prefill of several builds, interleaved (R rounds), on qwen3-8b synth: one line per
# build and shape with the median over the rounds. For telling which of a few commits moved a figure.
#   scripts/device/abc.sh "A=.carry/a/tensorfold B=.carry/tensorfold" [rounds]
# A build may carry environment settings after a colon, joined by +: "U=.carry/tensorfold:TF_LAB_M1=apart".
set -u
BINS=$1 ROUNDS=${2:-2}
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
ARGS=${ARGS:-"--prompt-len 128,4096 --batch 1 --gen-len 64 --repeat 1"}
mkdir -p "$OUT/abc"
export XDG_CACHE_HOME=/tmp/xdg
first=${BINS%% *}
first=${first#*=}
[[ -f $CKPT/config.json ]] || timeout 400 "${first%%:*}" synth --like qwen3-8b --out "$CKPT" | tail -1
for r in $(seq 1 "$ROUNDS"); do
  for nb in $BINS; do
    bin=${nb#*=} envs=()
    # shellcheck disable=SC2206
    [[ $bin == *:* ]] && e=${bin#*:} && envs=(${e//+/ }) && bin=${bin%%:*}
    # shellcheck disable=SC2086
    env "${envs[@]}" timeout 200 "$bin" bench --model "$CKPT" --device cuda $ARGS --json "$OUT/abc/${nb%%=*}-$r.json" >/dev/null 2>&1 \
      || echo "${nb%%=*} round $r failed"
  done
done
python3 - "$OUT/abc" $BINS <<'PY'
import glob, json, statistics, sys
d, names = sys.argv[1], [b.split("=")[0] for b in sys.argv[2:]]
runs = {n: [json.load(open(f))["results"] for f in sorted(glob.glob(f"{d}/{n}-*.json"))] for n in names}
print(f"{'build':>6} {'prompt':>6} {'batch':>5} {'decode tok/s':>13} {'prefill tok/s':>14}")
for n in names:
    for i, r in enumerate(runs[n][0] if runs[n] else []):
        med = lambda k: statistics.median(x[i][k] for x in runs[n])
        print(f"{n:>6} {r['prompt_len']:>6} {r['batch']:>5} {med('decode_tok_s'):>13.1f} {med('prefill_tok_s'):>14.0f}")
PY
