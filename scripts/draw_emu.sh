#!/usr/bin/env bash
# Builds the host emulation of kernels/draw.cu (scripts/draw_emu: a block's 1024 threads as OS
# threads) into target/draw_emu/emu, then runs the draw test that feeds it (crates/cuda/src/draw/
# emulated.rs, ignored by default): every row's token against the host sampler's, with no GPU.
# Usage: scripts/draw_emu.sh [--build-only]   (scripts/test.sh builds it so; its cargo test runs it)
set -eu
cd "$(dirname "$0")/.."
mkdir -p target/draw_emu
python3 scripts/draw_emu/extract.py target/draw_emu/helpers.h
g++ -std=c++20 -O2 -ffp-contract=off -pthread -I target/draw_emu -o target/draw_emu/emu scripts/draw_emu/main.cpp
if [[ "${1:-}" == --build-only ]]; then
    exit 0
fi
cargo test -p tf-cuda --lib draw::emulated -- --ignored --nocapture
