#!/usr/bin/env bash
# Usage (on the GPU machine, repo root, after scripts/device/build.sh here and `tar xJf .carry-pack/pack.txz` there):
#   scripts/device/check_and_bench.sh
#   STEPS="tests bench peer draft prefix ptrace serve sampled" GEN=128 PROMPTS=128,4096 BATCHES=1,8,64 PEER_RUNS=128x1,128x64
#     DRAFTS="ngram early-exit:4" (the drafters of the draft step)
#   STEPS=serve CLIENTS=256 SERVE_PROMPTS=1024 SERVE_RUNS="128/512 512/256 128/512/sampled" SERVE_SECS=120
#     SERVE_FLAGS="--prefill-chunk 512" (more flags of serve)
#   STEPS="tests hybrid" HYBRIDS="qwen3.5-27b:16 qwen3-next-80b-a3b:4"
#   STEPS="tests moe" PROMPTS=128 BATCHES=1,64 GEN=32 MOES="qwen3-8b:12 qwen3-30b-a3b:12"
#   STEPS="bench tp" TP_DEVICE=cuda:0,0 (qwen3-8b at two ranks beside one; default: cuda, GPUs 0 and
#     1, on a host of two, else both ranks on GPU 0)
#   STEPS=tp70 TP70_LAYERS=12 (llama3-70b's shapes, shrunk, at two ranks beside one)
#   TF_CUDA_GRAPH_LOG=on (the device tests print each CUDA graph capture's outcome)
#   TF_CUDA_PDL=off STEPS=tests TESTS="golden engine" (every kernel after the one before it ends:
#     a test that passes only so has a race)
#   STEPS=sanitize SANITIZE="structured engine:concurrent_equals_solo" (test binaries, each with an
#     optional test-name filter, under compute-sanitizer's memcheck: sanitize.txt names the kernel
#     and address of each bad access; decode rounds run op by op unless SANITIZE_GRAPHS=on, as
#     recordings share their pool's intermediates, which memcheck reports as stale writes)
#   STEPS="tests moegemm" PROMPTS=128,4096 BATCHES=1,64,128,256 GEN=32 MOEGEMM=qwen3-30b-a3b:12
#     (MoE rounds per expert against the grouped wgmma GEMM, receipt.sh interleaved: moegemm.txt)
#   STEPS=moetrace MOETRACE_BATCHES="1 128" (kernel timelines of MOEGEMM's preset: a warm 4096-token
#     prefill and one decode round a batch, summarized: moetrace_*.txt)
#   STEPS="bench fp8" (qwen3-8b in FP8 beside bf16, the same prompts and batches)
#     FP8_FLAGS="--cuda-fp8-gemv-rows 32" (more flags of the FP8 bench)
# One call: the CUDA device tests, the qwen3-8b speed table (prefill and decode at each prompt x
# batch, with the card's copy and GEMM ceilings measured in the same run), transformers on the same
# checkpoint, drafting and prefix-cache benches, a warm 4096-token prefill's kernel timeline, and
# bench-serve runs against one `serve` at CLIENTS streams, and sampled decode (temperature 0.8 +
# top-p 0.95, top-k 50, a mixed round) against greedy in the same call at SAMPLED_BATCHES
# (default 1,8,64,128,256), and the hybrid presets' table (HYBRIDS: preset:layers, each
# synthesized with that many layers and benched at PROMPTS x BATCHES), and the MoE presets' table
# beside dense qwen3-8b shrunk alike (MOES, the same form), and qwen3-8b synthesized in FP8
# (`synth --dtype fp8`, [128, 128] blocks) benched at PROMPTS x BATCHES as `bench` is (fp8: its
# json, and fp8.txt with its decode speed over bf16's where `bench` ran too).
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
  # TESTS: the device test binaries to run (default: every one build.sh carried).
  for t in ${TESTS:-$(ls .carry/tests)}; do
    [[ -x .carry/tests/$t ]] || continue
    # diagnose prints each family's drifting ops whether it passes or not: kept in tests.log.
    flags=(--test-threads=1); [[ $t == diagnose ]] && flags+=(--nocapture)
    left 50 "test $t" && stamp "test $t" && timeout 150 ".carry/tests/$t" "${flags[@]}" 2>&1 | tee -a "$W/tests.log" \
      | grep -E "FAILED|panicked|test result" | head -5 | sed "s/^/$t: /" | tee -a "$OUT/tests.txt"
  done
fi
if has sanitize; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for spec in ${SANITIZE:-structured}; do
    t=${spec%%:*}; filter=; [[ $spec == *:* ]] && filter=${spec#*:}
    [[ -x .carry/tests/$t ]] || continue
    left 120 "sanitize $spec" || continue
    stamp "sanitize $spec"
    graphs=off; [[ ${SANITIZE_GRAPHS:-off} == on ]] && graphs=on
    # shellcheck disable=SC2086
    TF_CUDA_GRAPHS=$graphs timeout 240 "$CS" --tool memcheck --print-limit 20 ".carry/tests/$t" --test-threads=1 $filter > "$W/sanitize-$t.log" 2>&1
    { echo "== $spec (exit $?)"; grep -E "^=========[[:space:]]+(Invalid|Program hit|at |Address|by thread)|ERROR SUMMARY" \
      "$W/sanitize-$t.log" | head -40; } >> "$OUT/sanitize.txt"
  done
fi
# The qwen3-8b checkpoint, for the steps that run on it.
if [[ " $STEPS " =~ \ (bench|peer|draft|prefix|ptrace|serve|sampled|tp)\  && ! -f $CKPT/config.json ]]; then
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
  # DRAFTS: the drafters benched, each into draft-<kind>.json (early exit drafts with the
  # checkpoint's first layers, picking its tokens on the device).
  for kind in ${DRAFTS:-ngram early-exit:4}; do
    left 120 "draft $kind" && stamp "draft $kind" && timeout 110 "$BIN" bench-draft --model "$CKPT" --device cuda \
      --draft "$kind" --gen-len 128 --json "$OUT/draft-${kind//[:\/]/-}.json" > "$W/draft-${kind//[:\/]/-}.log" 2>&1
  done
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
if has serve; then
  # bench-serve against one `serve` on the checkpoint (scheduling defaults of a GPU): each run
  # IN/OUT[/sampled] is CLIENTS streams, at most SERVE_SECS seconds (then cut; figures cover the
  # requests that completed). sampled: temperature 0.8, top-p 0.95.
  CLIENTS=${CLIENTS:-256}
  SERVE_PROMPTS=${SERVE_PROMPTS:-1024}
  SERVE_SECS=${SERVE_SECS:-120}
  if left $((SERVE_SECS + 90)) serve; then
    stamp "serve start"
    # shellcheck disable=SC2086
    "$BIN" serve --model "$CKPT" --device cuda --port 0 ${SERVE_FLAGS:-} > "$W/serve.out" 2> "$W/serve.log" &
    SPID=$!
    for _ in $(seq 240); do grep -q "^listening on " "$W/serve.out" && break; kill -0 $SPID 2>/dev/null || break; sleep 1; done
    URL=$(sed -n 's/^listening on //p' "$W/serve.out" | head -1)
    grep -E "kv cache|scheduling" "$W/serve.log" | sed 's/^.*serve: //' | tee "$OUT/serve_banner.txt"
    for run in ${SERVE_RUNS:-128/512 512/256 128/512/sampled}; do
      IFS=/ read -r IN OUTLEN MODE <<< "$run"
      samp=(); [[ $MODE == sampled ]] && samp=(--temperature 0.8 --top-p 0.95)
      name=serve_${IN}_${OUTLEN}${MODE:+_$MODE}
      [[ -n $URL ]] && left $((SERVE_SECS + 20)) "bench-serve $run" && stamp "bench-serve $run" \
        && timeout $((SERVE_SECS + 15)) "$BIN" bench-serve --url "$URL" --max-concurrency "$CLIENTS" \
          --num-prompts "$SERVE_PROMPTS" --random-input-len "$IN" --random-output-len "$OUTLEN" "${samp[@]}" \
          --time-limit "$SERVE_SECS" --result-json "$OUT/$name.json" > "$W/$name.txt" 2>&1
      python3 - "$OUT/$name.json" "$run" <<'PY' 2>/dev/null | tee -a "$OUT/serve.txt"
import json, sys
r = json.load(open(sys.argv[1]))
f = lambda k: "-" if r.get(k) is None else f"{r[k]:.1f}"
print(f"bench-serve {sys.argv[2]} x{r['max_concurrency']}: {r['completed']} done, {r['failed']} failed, "
      f"{f('output_throughput')} tok/s, TTFT p50/p99 {f('median_ttft_ms')}/{f('p99_ttft_ms')} ms, "
      f"ITL p50/p99 {f('median_itl_ms')}/{f('p99_itl_ms')} ms, TPOT p50 {f('median_tpot_ms')} ms, {f('duration')} s")
PY
    done
    kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
  fi
fi
if has sampled; then
  SB=${SAMPLED_BATCHES:-1,8,64,128,256}
  left 150 sampled && stamp sampled && timeout 140 "$BIN" bench --model "$CKPT" --device cuda --prompt-len 128 \
    --batch "$SB" --gen-len 64 --repeat 1 --sample greedy,candidates,mixed --temperature 0.8 --top-p 0.95 \
    --json "$OUT/sampled_top_p.json" > "$W/sampled_top_p.txt" 2>&1
  left 120 "sampled top-k" && stamp "sampled top-k" && timeout 110 "$BIN" bench --model "$CKPT" --device cuda \
    --prompt-len 128 --batch "$SB" --gen-len 64 --repeat 1 --sample greedy,candidates --temperature 0.8 --top-k 50 \
    --json "$OUT/sampled_top_k.json" > "$W/sampled_top_k.txt" 2>&1
  grep -h "of greedy" "$W"/sampled_top_p.txt "$W"/sampled_top_k.txt 2>/dev/null | sed 's/| prefill.*| decode/| decode/' \
    | tee "$OUT/sampled.txt"
  grep -h -iE "panicked|error" "$W"/sampled_top_p.txt "$W"/sampled_top_k.txt 2>/dev/null | head -3
fi
if has fp8; then
  CKPT8=${CKPT8:-/tmp/qwen3-8b-fp8}
  [[ -f $CKPT8/config.json ]] || { left 300 "synth fp8" && stamp "synth fp8" \
    && timeout 400 "$BIN" synth --like qwen3-8b --dtype fp8 --out "$CKPT8" > "$W/synth_fp8.txt" 2>&1; }
  # shellcheck disable=SC2086
  [[ -f $CKPT8/config.json ]] && left 200 fp8 && stamp fp8 && timeout 300 "$BIN" bench --model "$CKPT8" --device cuda \
    --prompt-len "$PROMPTS" --batch "$BATCHES" --gen-len "$GEN" --repeat 2 ${FP8_FLAGS:-} --json "$OUT/fp8.json" \
    > "$W/fp8.log" 2>&1
  grep -iE "panicked|error" "$W/fp8.log" | head -3
  python3 - "$OUT/fp8.json" "$OUT/ours.json" <<'PY' 2>/dev/null | tee "$OUT/fp8.txt"
import json, sys
f8 = json.load(open(sys.argv[1]))
try:
    bf = {(r["prompt_len"], r["batch"]): r for r in json.load(open(sys.argv[2]))["results"]}
except OSError:
    bf = {}
print(f"qwen3-8b fp8: weights {f8['weight_bytes'] / 1e9:.2f} GB (bf16 {f8['weight_bytes_bf16'] / 1e9:.2f} GB)")
for r in f8["results"]:
    b = bf.get((r["prompt_len"], r["batch"]))
    roof = r.get("decode_roofline_ratio")
    line = (f"prompt {r['prompt_len']:>5} batch {r['batch']:>3}: decode {r['decode_tok_s']:9.1f} tok/s "
            f"roofline {'-' if roof is None else f'{roof:.3f}'}, prefill {r['prefill_tok_s']:9.1f} tok/s")
    if b:
        line += f" | over bf16: decode {r['decode_tok_s'] / b['decode_tok_s']:.3f}, prefill {r['prefill_tok_s'] / b['prefill_tok_s']:.3f}"
    print(line)
PY
fi
if has tp; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  TPD=${TP_DEVICE:-$( ((NGPU >= 2)) && echo cuda || echo cuda:0,0)}
  left 200 tp && stamp "tp on $TPD" && timeout 300 "$BIN" bench --model "$CKPT" --device "$TPD" \
    --tensor-parallel-size 2 --prompt-len "$PROMPTS" --batch "$BATCHES" --gen-len "$GEN" --repeat 1 \
    --json "$OUT/tp.json" > "$W/tp.log" 2>&1
  grep -iE "panicked|error" "$W/tp.log" | head -3
  python3 scripts/device/tp_compare.py "$OUT/tp.json" "$OUT/ours.json" "qwen3-8b on $TPD" 2>/dev/null | tee "$OUT/tp.txt"
fi
if has tp70; then
  # Llama 3 70B's shapes shrunk to TP70_LAYERS layers (one card holds it for the comparison),
  # at 2 ranks (TP_DEVICE as above) beside 1, decode floors and MFU against the cards used.
  L=${TP70_LAYERS:-12}
  C70=/tmp/llama3-70b-$L
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  TPD=${TP_DEVICE:-$( ((NGPU >= 2)) && echo cuda || echo cuda:0,0)}
  [[ -f $C70/config.json ]] || { left 400 "synth llama3-70b:$L" && stamp "synth llama3-70b:$L" \
    && timeout 500 "$BIN" synth --like llama3-70b --layers "$L" --out "$C70" > "$W/synth_70b.txt" 2>&1; }
  for n in 1 2; do
    dev=cuda:0; ((n == 2)) && dev=$TPD
    [[ -f $C70/config.json ]] && left 150 "tp70 at $n" && stamp "tp70 at $n on $dev" && timeout 200 "$BIN" bench \
      --model "$C70" --device "$dev" --tensor-parallel-size $n --prompt-len 128,4096 --batch 1,64 --gen-len 64 \
      --repeat 1 --json "$OUT/tp70_$n.json" > "$W/tp70_$n.log" 2>&1
    grep -iE "panicked|error" "$W/tp70_$n.log" | head -3
  done
  python3 scripts/device/tp_compare.py "$OUT/tp70_2.json" "$OUT/tp70_1.json" "llama3-70b:$L on $TPD" 2>/dev/null \
    | tee "$OUT/tp70.txt"
fi
# Presets synthesized with fewer layers and benched at PROMPTS x BATCHES: presets STEP LIST
# (LIST: preset:layers ...), each to $OUT/STEP_PRESET.{json,txt}.
presets() {
  local step=$1; shift
  for h in "$@"; do
    IFS=: read -r LIKE LAYERS <<< "$h"
    HC=/tmp/$LIKE-$LAYERS
    [[ -f $HC/config.json ]] || { left 200 "synth $h" && stamp "synth $h" \
      && timeout 190 "$BIN" synth --like "$LIKE" --layers "$LAYERS" --out "$HC" > "$W/synth_$LIKE.txt" 2>&1; }
    [[ -f $HC/config.json ]] && left 150 "bench $h" && stamp "bench $h" && timeout 140 "$BIN" bench --model "$HC" \
      --device cuda --prompt-len "$PROMPTS" --batch "$BATCHES" --gen-len "$GEN" --repeat 1 \
      --json "$W/${step}_$LIKE.json" > "$W/${step}_$LIKE.txt" 2>&1
    rm -rf "$HC"
  done
}
if has hybrid; then
  # shellcheck disable=SC2086
  presets hybrid ${HYBRIDS:-qwen3.5-27b:16 qwen3-next-80b-a3b:4}
fi
if has moegemm; then
  # MoE rounds past 64 rows per expert (the default) against the grouped wgmma GEMM
  # (--cuda-moe-gemm grouped), interleaved on one MoE preset (MOEGEMM, preset:layers).
  IFS=: read -r LIKE LAYERS <<< "${MOEGEMM:-qwen3-30b-a3b:12}"
  HC=/tmp/$LIKE-$LAYERS
  [[ -f $HC/config.json ]] || { left 200 "synth $LIKE" && stamp "synth $LIKE" \
    && timeout 190 "$BIN" synth --like "$LIKE" --layers "$LAYERS" --out "$HC" > "$W/synth_$LIKE.txt" 2>&1; }
  if [[ -f $HC/config.json ]] && left 240 "moegemm receipt"; then
    stamp "moegemm receipt"
    OUT=$W CKPT=$HC LIKE="$LIKE:$LAYERS" ARGS="--prompt-len ${PROMPTS} --batch ${BATCHES} --gen-len ${GEN} --repeat 1" \
      A_FLAGS="--cuda-moe-gemm per-expert" B_FLAGS="--cuda-moe-gemm grouped" \
      timeout $((LIMIT - $(date +%s) + START - 20)) scripts/device/receipt.sh "$BIN" "$BIN" 2 | tee "$OUT/moegemm.txt"
  fi
fi
if has moetrace; then
  # Where an MoE round's time goes (MOEGEMM's preset, synthesized as moegemm does): kernel
  # timelines of a warm 4096-token prefill and of one decode round at each MOETRACE_BATCHES
  # batch (prompt 128), each summarized by trace_round.py into moetrace_<what>.txt.
  IFS=: read -r LIKE LAYERS <<< "${MOEGEMM:-qwen3-30b-a3b:12}"
  HC=/tmp/$LIKE-$LAYERS
  [[ -f $HC/config.json ]] || { left 200 "synth $LIKE" && stamp "synth $LIKE" \
    && timeout 190 "$BIN" synth --like "$LIKE" --layers "$LAYERS" --out "$HC" > "$W/synth_$LIKE.txt" 2>&1; }
  # name:prompt:batch:gen:round; round 2 is the second repeat's prefill, round 12 a decode round
  # (a round is counted where its tokens are picked; a prefill of many prompts may take a few).
  for spec in prefill:4096:1:1:2 ${MOETRACE_BATCHES:-1 128}; do
    [[ $spec == *:* ]] || spec=decode$spec:128:$spec:16:12
    IFS=: read -r name plen batch gen round <<< "$spec"
    [[ -f $HC/config.json ]] && left 80 "moetrace $name" && stamp "moetrace $name" \
      && timeout 75 "$BIN" bench --model "$HC" --device cuda --trace "$round:$round" --trace-out "$W/moetrace_$name.tsv" \
        --prompt-len "$plen" --batch "$batch" --gen-len "$gen" --repeat 2 > "$W/moetrace_$name.log" 2>&1 \
      && python3 scripts/device/trace_round.py "$W/moetrace_$name.tsv" > "$OUT/moetrace_$name.txt" 2>&1 \
      && gzip -f "$W/moetrace_$name.tsv"
  done
fi
if has moe; then
  # The MoE presets beside dense qwen3-8b (shrunk alike), each decode's floor ratio in one table.
  # shellcheck disable=SC2086
  presets moe ${MOES:-qwen3-8b:12 qwen3-30b-a3b:12 qwen3-next-80b-a3b:4 glm4.5-air:4 minimax-m2:4}
fi
stamp done
[[ -f $OUT/ptrace_summary.txt ]] && head -16 "$OUT/ptrace_summary.txt"
grep -E "^(measured|limits)" "$OUT/bench.txt" 2>/dev/null
cat "$OUT/tests.txt" "$OUT/serve.txt" 2>/dev/null
for f in "$W"/hybrid_*.txt "$W"/moe_*.txt; do [[ -f $f ]] && { echo "== $(basename "$f" .txt)"; grep -E "^(prompt|measured)" "$f"; grep -iE "panicked|error" "$f" | head -3; }; done
cat "$W"/hybrid_*.txt "$W"/moe_*.txt > "$OUT/presets.txt" 2>/dev/null
[[ -f $OUT/ours.json ]] && python3 scripts/device/table.py "$OUT/ours.json" "$OUT/peer.json"
