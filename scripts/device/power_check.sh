#!/usr/bin/env bash
# Power, clocks and throttle reasons while decode runs, with and without CUDA graphs (one bench
# process each, nvidia-smi sampling every 50 ms): is a graph round's head GEMV slower for power?
set -u
OUT=${OUT:-/tmp/tf-out}
CKPT=${CKPT:-/tmp/qwen3-8b}
BIN=${BIN:-.carry/tensorfold}
mkdir -p "$OUT"
export XDG_CACHE_HOME=/tmp/xdg TF_CUDA_CACHE=/tmp/tf-cuda-cache
[[ -f $CKPT/config.json ]] || timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" | tail -1
for g in 1 0; do
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,temperature.gpu,temperature.memory,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 50 > "$OUT/smi_g$g.csv" 2>/dev/null &
  smi=$!
  TF_CUDA_GRAPHS=$g timeout 200 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128 --batch 1 --gen-len 256 \
    --repeat 1 2>&1 | tail -1
  kill $smi
  python3 - "$OUT/smi_g$g.csv" "$g" <<'PY'
import sys, collections
rows = [l.strip().split(", ") for l in open(sys.argv[1]) if l.count(",") >= 6]
busy = [r for r in rows if float(r[1].split()[0]) > 200]
if not busy: print("graphs", sys.argv[2], "no busy samples"); sys.exit()
f = lambda i: sum(float(r[i].split()[0]) for r in busy) / len(busy)
print(f"graphs {sys.argv[2]}: {len(busy)} busy samples, power {f(1):.0f} W, sm {f(2):.0f} MHz, mem {f(3):.0f} MHz, "
      f"temp {f(4):.0f}/{busy[-1][5]} C, throttle {collections.Counter(r[6] for r in busy).most_common(3)}")
PY
done
