#!/usr/bin/env bash
# Session 21, call 1: o's tail in batch-1 decode (o_tail.sh's variants) and the carveout
# hypothesis. In call 6 of session 20 every o block on an SM of a TPC that hosted qk_norm_rope or
# decode attention (145 KB: the driver gives it a 164 KB carveout, the TMA GEMV needs 228) ended
# 5 us late, all at the same instant. Scheduling knobs only (same bits), interleaved, 3 rounds:
#   N     the defaults
#   C100  every kernel prefers the largest carveout (TF_CARVEOUT=100): no SM reconfigures
#   CU    C100 without the small kernels' padding
#   O124  o on 124 blocks (TF_GEMV_TUNE=256x256:g124)
#   ON1   o on gemv_tma_n1 (256x256:n)
# then the timelines of N and C100 at 128x1, and o's blocks in layer 18 of each.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
T=.carry/tensorfold
stamp abc
OUT=$W/dense bash scripts/device/abc.sh "N=$T C100=$T:TF_CARVEOUT=100 CU=$T:TF_CARVEOUT=100+TF_PAD_SMEM=0: O124=$T:TF_GEMV_TUNE=256x256:g124 ON1=$T:TF_GEMV_TUNE=256x256:n" 3 2>&1 | tee $OUT/abc.txt
stamp trace
OUT=$W VARIANTS="N C100:TF_CARVEOUT=100" timeout 200 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in N C100; do
  echo "== $v"; python3 scripts/device/late_sms.py $W/trace_${v}_128x1.tsv.gz 1 | sed -n 2,4p
  sed -n '/^round 1/,$p' $W/summary_${v}_128x1.txt | sed -n '/layer 18/,$p'
  python3 scripts/device/gemv_blocks.py $W/trace_${v}_128x1.tsv.gz 18 1 | head -40
done > $OUT/tails.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
stamp done
cat $OUT/abc.txt
grep -A3 "^blocks\|late blocks" $OUT/tails.txt | head -20
