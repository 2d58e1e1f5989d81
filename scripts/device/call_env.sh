#!/usr/bin/env bash
# Sourced by a session's call script: output folders, the kernel and fixture caches, the commit
# line, and `stamp MSG` / `left SECONDS WHAT` (true while a step of about SECONDS still fits in
# LIMIT seconds from the start).
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
LIMIT=${LIMIT:-570}
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
left() { (( $(date +%s) - START + $1 < LIMIT )) || { stamp "skipped: $2 (needs ~$1 s)"; false; }; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
