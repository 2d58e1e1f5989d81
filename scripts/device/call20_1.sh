#!/usr/bin/env bash
# Session 20, call 1: where batch-1 decode's TMA GEMVs lose time, by scheduling knobs only (the
# same bits): TF_GEMV_TUNE (profile.rs `GemvTune`: blocks and pre-wait W stages per launch shape),
# the one-row lab `tma-xr` (W-only rings of 11 stages, so up to 10 stages banked before the wait).
# Interleaved A/B of the variants at prompt 128 and 4096, then timelines of the base and one variant.
set -u
OUT=${OUT:-/tmp/tf-out}
mkdir -p "$OUT"
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
stamp synth
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > "$OUT/synth.txt" 2>&1; tail -1 "$OUT/synth.txt"
L="1536x0:g128,384x0:g128,256x0:g128"
stamp abc
OUT=$OUT/dense bash scripts/device/abc.sh "B=.carry/tensorfold G=.carry/tensorfold:TF_GEMV_TUNE=$L X=.carry/tensorfold:TF_LAB_M1=tma-xr X10=.carry/tensorfold:TF_LAB_M1=tma-xr+TF_GEMV_PRE=10 XO=.carry/tensorfold:TF_LAB_M1=tma-xr+TF_GEMV_TUNE=256x256:p10 XG10=.carry/tensorfold:TF_LAB_M1=tma-xr+TF_GEMV_PRE=10+TF_GEMV_TUNE=$L" 2 2>&1 | tee "$OUT/abc.txt"
stamp trace
VARIANTS="B X10:TF_LAB_M1=tma-xr+TF_GEMV_PRE=10 G:TF_GEMV_TUNE=$L" timeout 330 bash scripts/device/trace.sh .carry/tensorfold "128x1" > "$OUT/trace.txt" 2>&1
for v in B X10 G; do echo "== $v"; sed -n '/^round 1/,$p' "$OUT/summary_${v}_128x1.txt" | sed -n '1,22p;/layer 18/,$p'; done
stamp done
cat "$OUT/abc.txt"
