#!/usr/bin/env bash
# Where decode time goes, in place: benches one binary under several profiling-knob settings and
# prints each variant's decode ms per round (differences to the first are in-situ costs).
# A variant is S=mask, the TF_PROFILE_SKIP bits (crates/cuda/src/profile.rs: 1 attention,
# 2 the norms, 4 glu, 8 qk_norm_rope, 16 matmuls but the vocabulary head; rounds of at most
# 64 rows; results are wrong, only the times count), or M=on / M=BxS / M=row:NAME, a one-row GEMV
# schedule (TF_LAB_M1, profile.rs `M1Lab`: the one-row kernel, at most B blocks an SM and S ring
# stages, or a one-row variant of the few-row GEMV; exact either way). Join with +.
#   scripts/device/skip.sh BIN "S=0 S=1 S=2 M=on M=2x4+S=16 M=row:u2s6"
set -u
BIN=$1 VARIANTS=${2:-"S=0 S=1 S=2 S=4 S=8 S=16 S=15 S=31"}
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
ARGS=${ARGS:-"--prompt-len 128,4096 --batch 1,8 --gen-len 128 --repeat 2"}
mkdir -p "$OUT/skip"
export XDG_CACHE_HOME=/tmp/xdg
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for v in $VARIANTS; do
  envs=()
  for kv in ${v//+/ }; do
    case ${kv%%=*} in
      S) envs+=("TF_PROFILE_SKIP=${kv#*=}") ;;
      M) envs+=("TF_LAB_M1=${kv#*=}") ;;
    esac
  done
  # shellcheck disable=SC2086
  env "${envs[@]}" timeout 200 "$BIN" bench --model "$CKPT" --device cuda $ARGS --json "$OUT/skip/${v//[=+:]/_}.json" >/dev/null 2>&1 \
    || echo "variant $v failed"
done
python3 - "$OUT/skip" $VARIANTS <<'PY'
import json, os, sys
d, vs = sys.argv[1], sys.argv[2:]
name = lambda v: v.replace("=", "_").replace("+", "_").replace(":", "_")  # the device tool fetches plain names only
runs = {v: json.load(open(f"{d}/{name(v)}.json"))["results"] for v in vs if os.path.exists(f"{d}/{name(v)}.json")}
vs = [v for v in vs if v in runs]
base = runs[vs[0]]
print("decode ms per round")
print(f"{'prompt':>6} {'batch':>5} " + " ".join(f"{v:>12}" for v in vs))
for i, r in enumerate(base):
    print(f"{r['prompt_len']:>6} {r['batch']:>5} " + " ".join(f"{runs[v][i]['decode_round_ms']:>12.3f}" for v in vs))
print("prefill tok/s")
for i, r in enumerate(base):
    print(f"{r['prompt_len']:>6} {r['batch']:>5} " + " ".join(f"{runs[v][i]['prefill_tok_s']:>12.0f}" for v in vs))
PY
