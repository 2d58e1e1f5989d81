#!/usr/bin/env bash
# CPU prefill/decode tokens/s for the largest fixture and a synthesized qwen3-0.6b (bf16).
# Usage: scripts/bench_cpu.sh [THREADS]   (a benchmark, not a test: it prints figures)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-$(nproc)}
cargo build --release -p tensorfold
bin=target/release/tensorfold
work=${TMPDIR:-/tmp}/tensorfold-bench
mkdir -p "$work"
[ -f "$work/qwen3-0.6b/model.safetensors" ] || $bin synth --like qwen3-0.6b --out "$work/qwen3-0.6b" --dtype bf16
echo "== fixture gemma3 (largest fixture)"
$bin bench --model tests/fixtures/gemma3 --prompt-len 30 --gen-len 64 --threads "$threads" --json "$work/fixture.json"
echo "== synthesized qwen3-0.6b bf16"
$bin bench --model "$work/qwen3-0.6b" --prompt-len 128 --gen-len 32 --threads "$threads" --json "$work/qwen3-0.6b.json"
