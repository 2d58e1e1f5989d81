#!/usr/bin/env bash
# Session 18, call 3: gemv_tma_xr only where a block streams >= 512 KB. The
# ops and engine tests, N1 (gemv_tma_n1 at
# one row, lab tma-n1) / B (xr for gate_up, down, head) at batch 1, both timelines at 128x1.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" "$W"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
(timeout 400 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$W/synth.txt" 2>&1 &)
for t in ops engine; do
  stamp "test $t"
  timeout 200 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a "$W/tests.log" | grep -E "FAILED|panicked|test result" | head -20
done
while [[ ! -f /tmp/qwen3-8b/config.json ]] || pgrep -f "tensorfold synth" >/dev/null; do sleep 2; done
stamp abc
OUT=$W/dense bash scripts/device/abc.sh "N1=.carry/tensorfold:TF_LAB_M1=tma-n1 B=.carry/tensorfold" 3 2>&1 | tee "$OUT/abc.txt"
stamp trace
OUT=$W VARIANTS="B N1:TF_LAB_M1=tma-n1" bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$W/trace.txt" 2>&1
for v in B N1; do
  echo "== $v"; sed -n '/^round 1/,$p' "$W/summary_${v}_128x1.txt" | sed -n '1,22p;/layer 18/,$p'
done | tee "$OUT/summaries.txt"
tar czf "$OUT/work.tgz" -C "$W" .
stamp done
