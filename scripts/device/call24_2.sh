#!/usr/bin/env bash
# Session 24, call 2: is o's late x row (NOTES.md session 23; call 1: XWARM did not move it) the
# bulk copy's or the memory system's? Labs on the one binary: XLD (the GEMV's x row by ordinary
# loads), OB32 (attention writes its output pairs as one store each), both. Interleaved, then
# the timelines with the mark at the x row's landing (o_tiles.py, o_start.py).
set -u
. scripts/device/call_env.sh
T=.carry/tensorfold
timeout 300 $T synth --like qwen3-8b --out /tmp/qwen3-8b > $W/synth.txt 2>&1
stamp abc
ARGS="--prompt-len 128,4096 --batch 1 --gen-len 128 --repeat 1" OUT=$W/ab timeout 220 bash scripts/device/abc.sh \
  "U=$T XL=$T:TF_KERNEL_LAB=XLD OB=$T:TF_KERNEL_LAB=OB32 XO=$T:TF_KERNEL_LAB=XLD,OB32" 4 2>&1 | tee $OUT/abc.txt
stamp trace
left 200 trace && OUT=$W VARIANTS="U:TF_TRACE_MARK=X XL:TF_TRACE_MARK=X+TF_KERNEL_LAB=XLD OB:TF_TRACE_MARK=X+TF_KERNEL_LAB=OB32 XO:TF_TRACE_MARK=X+TF_KERNEL_LAB=XLD,OB32" timeout 260 \
  bash scripts/device/trace.sh $T "128x1" > $W/trace.txt 2>&1
for v in U XL OB XO; do
  echo "== $v"
  [[ -f $W/trace_${v}_128x1.tsv.gz ]] && (cd scripts/device && python3 o_start.py $W/trace_${v}_128x1.tsv.gz 1)
done | tee $OUT/o_start.txt
tar czf "$OUT/work.tgz" -C $W .
stamp done
