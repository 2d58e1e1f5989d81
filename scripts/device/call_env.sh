#!/usr/bin/env bash
# Sourced by a session's call script: output folders, the kernel and fixture caches, the commit
# line, `stamp MSG` / `left SECONDS WHAT` (true while a step of about SECONDS still fits in
# LIMIT seconds from the start), and `device_tests NAME...` (each carried test binary while time
# is left, the log in $W/tests.log, the summaries in $OUT/tests.txt).
OUT=${OUT:-/tmp/tf-out}
W=/tmp/work
mkdir -p "$OUT" $W
export TF_CUDA_CACHE=/tmp/tf-cuda-cache TF_FIXTURES=$PWD/tests/fixtures XDG_CACHE_HOME=/tmp/xdg
START=$(date +%s)
LIMIT=${LIMIT:-570}
stamp() { echo "[$(($(date +%s) - START)) s] $*"; }
left() { (( $(date +%s) - START + $1 < LIMIT )) || { stamp "skipped: $2 (needs ~$1 s)"; false; }; }
cat .carry/commit.txt | tee "$OUT/commit.txt"
device_tests() {
  for t in "$@"; do
    left 50 "test $t" && stamp "test $t" && timeout 110 ".carry/tests/$t" --test-threads=1 2>&1 | tee -a $W/tests.log \
      | grep -E "FAILED|panicked|test result" | head -5 | tee -a "$OUT/tests.txt"
  done
}
