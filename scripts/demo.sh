#!/usr/bin/env bash
# The README's first command: fetch Gemma 3 270M (Q4_K_M GGUF) into the cache if missing,
# build TensorFold, and generate a greedy continuation of a prompt on the CPU.
# Usage: scripts/demo.sh ["prompt"] [extra tensorfold generate flags...]
#   (32 tokens unless the flags give --max-tokens)
set -euo pipefail
cd "$(dirname "$0")/.."
prompt="${1:-The capital of France is}"
shift || true
flags=("$@")
case " $* " in
    *" --max-tokens "* | *" --max-tokens="*) ;;
    *) flags=(--max-tokens 32 "${flags[@]}") ;;
esac
model="$(scripts/fetch_gemma3_gguf.sh)"
cargo build --release -p tensorfold >&2
exec target/release/tensorfold generate --model "$model" --prompt "$prompt" "${flags[@]}"
