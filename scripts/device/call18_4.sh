#!/usr/bin/env bash
# Session 18, call 4: the final code (gemv_tma_xr a lab). The ops and engine tests; the MoE
# expert table's Arc (M0 = bb3acda, the expert table cloned, against B) on qwen3-30b-a3b synth
# cut to 12 layers, with the bench's MoE ratios; and serving with recordings per batch-size
# bucket (A = the session-16 build, one recording a row count, against B) on qwen3-8b synth.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" "$W"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 400 .carry/tensorfold synth --like qwen3-30b-a3b --layers 12 --out /tmp/moe > "$W/synth-moe.txt" 2>&1
 timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$W/synth.txt" 2>&1) &
for t in ops engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$W/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
while [[ ! -f /tmp/moe/config.json ]] || pgrep -f "synth --like qwen3-30b" >/dev/null; do sleep 2; done
stamp abc-moe
CKPT=/tmp/moe ARGS="--prompt-len 128 --batch 1,8,64 --gen-len 32 --repeat 1" OUT=$W/moe \
  bash scripts/device/abc.sh "M0=.carry/m0/tensorfold B=.carry/tensorfold" 2 2>&1 | tee "$OUT/abc-moe.txt"
python3 - "$W/moe/abc/B-2.json" <<'PY' | tee "$OUT/moe-ratios.txt"
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print({k: r.get(k) for k in ("prompt_len", "batch", "decode_tok_s", "decode_roofline_ratio", "prefill_mfu")})
PY
rm -rf /tmp/moe
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "synth --like qwen3-8b" >/dev/null; do sleep 2; done
for b in A=.carry/a/tensorfold B=.carry/tensorfold; do
  stamp "serve ${b%%=*}"
  timeout 150 python3 scripts/bench_serve.py --model /tmp/qwen3-8b --binary "${b#*=}" --concurrency 3,6,12 \
    --requests 36 --time-limit 15 --prompt-len 128 --max-tokens 64 --kv-memory 8GiB --server-args --device cuda \
    2>&1 | tail -5 | tee -a "$OUT/serve.txt"
done
tar czf "$OUT/work.tgz" -C "$W" .
stamp done
