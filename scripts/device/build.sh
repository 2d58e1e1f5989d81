#!/usr/bin/env bash
# Usage (here, repo root): scripts/device/build.sh
# Builds what the GPU-machine scripts run: the release binary with the cuda feature and the
# tf-cuda test binaries, copied into .carry/ (ignored), and packs them into .carry-pack/pack.txz
# (xz -9: the test binaries share most of their code, and the working tree with the fixtures
# and an unpacked .carry is past the 64 MiB a device call carries). Carry [".carry-pack"] and
# start the command with `tar xJf .carry-pack/pack.txz`.
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
mkdir -p .carry-pack && rm -f .carry-pack/pack.txz
tar cf - .carry | xz -9 -T2 > .carry-pack/pack.txz
ls -la .carry-pack/pack.txz
