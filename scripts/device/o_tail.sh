#!/usr/bin/env bash
# For the next session (written in session 20, not run): o's tail in batch-1 decode. With the
# session-20 defaults, o's blocks on the TPC partners of decode attention's SMs end ~5 us late
# (NOTES.md, session 20). Scheduling knobs only (same bits), interleaved at batch 1, 3 rounds:
#   N     the defaults
#   O124  o on 124 blocks (TF_GEMV_TUNE=256x256:g124): none placed after attention leaves its SMs
#   ON1   o on the x-box kernel gemv_tma_n1 (256x256:n), the rest on gemv_tma_xr
#   BOTH  both
# then the timelines of N and the best-looking variant at 128x1, and late_sms.py on o for each.
#   bash scripts/device/o_tail.sh   (carry .carry from scripts/device/build.sh)
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
OUT=$W/dense bash scripts/device/abc.sh "N=$T O124=$T:TF_GEMV_TUNE=256x256:g124 ON1=$T:TF_GEMV_TUNE=256x256:n BOTH=$T:TF_GEMV_TUNE=256x256:g124:n" 3 2>&1 | tee $OUT/abc.txt
stamp trace
OUT=$W VARIANTS="N O124:TF_GEMV_TUNE=256x256:g124 ON1:TF_GEMV_TUNE=256x256:n" timeout 240 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in N O124 ON1; do
  echo "== $v"; python3 scripts/device/late_sms.py $W/trace_${v}_128x1.tsv.gz 1 | sed -n 2,4p
  sed -n '/^round 1/,$p' $W/summary_${v}_128x1.txt | sed -n '/layer 18/,$p'
done | tee $OUT/tails.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
cat $OUT/abc.txt
