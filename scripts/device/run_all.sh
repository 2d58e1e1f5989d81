#!/usr/bin/env bash
# One device call: CUDA correctness tests, then the qwen3-8b speed sweep and the transformers peer,
# drafting cost (bench-draft) and multi-turn prefix caching (bench-prefix) through the engine, all
# on the same GPU in the same call. Run from the repo root on the GPU machine after building here
# (see scripts/device/build.sh). Writes logs and JSON under $OUT; prints a table last.
#   STEPS="tests bench peer draft prefix" (default all)  GEN=256  PROMPTS=128,4096  BATCHES=1,8,64
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
STEPS=${STEPS:-"tests bench peer draft prefix"}
GEN=${GEN:-256}
PROMPTS=${PROMPTS:-128,4096}
BATCHES=${BATCHES:-1,8,64}
PEER_RUNS=${PEER_RUNS:-128x1,4096x1,128x64}
BIN=.carry/tensorfold
CKPT=${CKPT:-/tmp/qwen3-8b}
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
cat .carry/commit.txt 2>/dev/null | tee "$OUT/commit.txt"

if [[ $STEPS == *tests* ]]; then
  for t in .carry/tests/ops .carry/tests/golden .carry/tests/engine .carry/tests/diagnose; do
    echo "== $t"
    timeout 150 "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/tests.log" | grep -E "test |result|max \||attention case|panicked|skipped" | head -60
  done
fi
if [[ $STEPS == *bench* || $STEPS == *peer* || $STEPS == *draft* || $STEPS == *prefix* ]] && [[ ! -f $CKPT/config.json ]]; then
  /usr/bin/time -f "synth %e s" timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" 2>&1 | tail -2
fi
if [[ $STEPS == *bench* ]]; then
  timeout 400 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$PROMPTS" --batch "$BATCHES" \
    --gen-len "$GEN" --repeat 3 --json "$OUT/ours.json" 2>&1 | tee "$OUT/bench.log"
fi
if [[ $STEPS == *peer* ]]; then
  PYTHONUNBUFFERED=1 timeout 400 python3 scripts/device/peer_hf.py --model "$CKPT" --runs "$PEER_RUNS" \
    --gen-len "$GEN" --repeat 1 --json "$OUT/peer.json" 2>&1 | grep -v Warning | tee "$OUT/peer.log" | tail -8
fi
if [[ $STEPS == *draft* ]]; then
  timeout 300 "$BIN" bench-draft --model "$CKPT" --device cuda --draft ngram --gen-len 128 \
    --json "$OUT/draft.json" 2>&1 | tee "$OUT/draft.log" | tail -4
fi
if [[ $STEPS == *prefix* ]]; then
  timeout 300 "$BIN" bench-prefix --model "$CKPT" --device cuda --system-len 2000 --turns 8 \
    --json "$OUT/prefix.json" 2>&1 | tee "$OUT/prefix.log" | tail -14
fi
grep -E "^test result|FAILED|panicked" "$OUT/tests.log" 2>/dev/null | sort | uniq -c
python3 scripts/device/table.py "$OUT/ours.json" "$OUT/peer.json"
