#!/usr/bin/env bash
# Usage (on the GPU machine, repo root, after scripts/device/build.sh here):
#   scripts/device/check_and_bench.sh
#   STEPS="tests bench peer draft prefix ptrace" GEN=128 PROMPTS=128,4096 BATCHES=1,8,64 PEER_RUNS=128x1,128x64
# One call: the CUDA device tests, the qwen3-8b speed table (prefill and decode at each prompt x
# batch, with the card's copy and GEMM ceilings measured in the same run), transformers on the same
# checkpoint, drafting and prefix-cache benches, and a warm 4096-token prefill's kernel timeline.
# Everything under $OUT; a short table printed last. LIMIT (seconds, default 570) skips the steps
# that no longer fit.
set -u
OUT=${OUT:-/tmp/tf-out}
W=$OUT/work
mkdir -p "$OUT" "$W"
STEPS=${STEPS:-"tests bench peer"}
GEN=${GEN:-128}
PROMPTS=${PROMPTS:-128,4096}
BATCHES=${BATCHES:-1,8,64}
PEER_RUNS=${PEER_RUNS:-128x1,128x64}
BIN=.carry/tensorfold
CKPT=${CKPT:-/tmp/qwen3-8b}
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
LIMIT=${LIMIT:-570}
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
left() { (( $(date +%s) - START + $1 < LIMIT )) || { stamp "skipped: $2 (needs ~$1 s)"; false; }; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv > "$OUT/gpu.txt" 2>&1
cat .carry/commit.txt 2>/dev/null | tee "$OUT/commit.txt"
if has tests; then
  for t in ops golden engine sample logprob moe diagnose; do
    [[ -x .carry/tests/$t ]] || continue
    left 50 "test $t" && stamp "test $t" && timeout 150 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$W/tests.log" \
      | grep -E "FAILED|panicked|test result" | head -5 | sed "s/^/$t: /" | tee -a "$OUT/tests.txt"
  done
fi
if [[ ! -f $CKPT/config.json ]]; then
  stamp synth && timeout 400 "$BIN" synth --like qwen3-8b --out "$CKPT" > "$W/synth.txt" 2>&1
fi
if has bench; then
  stamp bench && timeout 300 "$BIN" bench --model "$CKPT" --device cuda --prompt-len "$PROMPTS" --batch "$BATCHES" \
    --gen-len "$GEN" --repeat 2 --json "$OUT/ours.json" > "$OUT/bench.txt" 2>&1
fi
if has peer; then
  left 200 peer && stamp peer && PYTHONUNBUFFERED=1 timeout 190 python3 scripts/device/peer_hf.py --model "$CKPT" \
    --runs "$PEER_RUNS" --gen-len "$GEN" --repeat 1 --json "$OUT/peer.json" 2>&1 | grep -v Warning > "$W/peer.log"
fi
if has draft; then
  left 120 draft && stamp draft && timeout 110 "$BIN" bench-draft --model "$CKPT" --device cuda --draft ngram \
    --gen-len 128 --json "$OUT/draft.json" > "$W/draft.log" 2>&1
fi
if has prefix; then
  left 120 prefix && stamp prefix && timeout 110 "$BIN" bench-prefix --model "$CKPT" --device cuda --system-len 2000 \
    --turns 8 --json "$OUT/prefix.json" > "$W/prefix.log" 2>&1
fi
if has ptrace; then
  # Rounds 1 and 2 are the two repeats' prefills: the second is warm.
  left 80 ptrace && stamp ptrace && timeout 75 "$BIN" bench --model "$CKPT" --device cuda --trace 2:2 \
    --trace-out "$W/ptrace.tsv" --prompt-len 4096 --batch 1 --gen-len 1 --repeat 2 > "$W/ptrace.txt" 2>&1 \
    && python3 scripts/device/trace_round.py "$W/ptrace.tsv" > "$OUT/ptrace_summary.txt" 2>&1 && gzip -f "$W/ptrace.tsv"
fi
stamp done
[[ -f $OUT/ptrace_summary.txt ]] && head -16 "$OUT/ptrace_summary.txt"
grep -E "^(measured|limits)" "$OUT/bench.txt" 2>/dev/null
cat "$OUT/tests.txt" 2>/dev/null
python3 scripts/device/table.py "$OUT/ours.json" "$OUT/peer.json"
