#!/usr/bin/env bash
# Session 20, call 4: do the small kernels launched early beside the GEMVs (programmatic dependent
# launch) slow the GEMV blocks on their SMs? TF_PDL_OFF launches qk_norm_rope (Q) or it, rms_norm_j4
# and glu_packed (A) without PDL, with the default one-row GEMV (U) and with lab tma-xr (X).
# Interleaved at batch 1, then XQ's timeline at 128x1. Everything under $OUT/work.tgz.
set -u
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
timeout 300 .carry/tensorfold synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp abc
T=.carry/tensorfold Q=TF_PDL_OFF=qk_norm_rope A=TF_PDL_OFF=qk_norm_rope,rms_norm_j4,glu_packed X=TF_LAB_M1=tma-xr
OUT=$W/dense bash scripts/device/abc.sh "U=$T X=$T:$X UQ=$T:$Q XQ=$T:$X+$Q UA=$T:$A XA=$T:$X+$A" 2 2>&1 | tee $W/abc.txt
stamp trace
OUT=$W VARIANTS="XQ:$X+$Q" timeout 200 bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
tar czf "$OUT/work.tgz" -C $W .
sed -n '/^round 1/,$p' $W/summary_XQ_128x1.txt | sed -n '1,24p;/layer 18/,$p'
stamp done
cat $W/abc.txt
