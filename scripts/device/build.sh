#!/usr/bin/env bash
# Usage (here, repo root): scripts/device/build.sh
# Builds what the GPU-machine scripts run: the release binary with the cuda feature and the
# tf-cuda test binaries, copied into .carry/ (ignored; carry it to the GPU machine).
set -euo pipefail
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/../target-cuda}
cargo build --release -p tensorfold --features cuda
# A baseline build in .carry/a (receipt.sh) is kept.
[[ -d .carry/a ]] && mv .carry/a /tmp/tf-carry-a-$$
rm -rf .carry && mkdir -p .carry/tests
[[ -d /tmp/tf-carry-a-$$ ]] && mv /tmp/tf-carry-a-$$ .carry/a
cp "$CARGO_TARGET_DIR/release/tensorfold" .carry/
cargo test --release -p tf-cuda --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys,shutil
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] != ["bin"]:
        shutil.copy(m["executable"], ".carry/tests/" + m["target"]["name"])'
strip .carry/tensorfold .carry/tests/*
{ git rev-parse HEAD; git status --short | { grep -c . || true; } | sed "s/^/dirty files: /"; } > .carry/commit.txt
ls -la .carry .carry/tests
