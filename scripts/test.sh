#!/usr/bin/env bash
# The test command a newcomer runs (and CI runs through .ci/run): every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Gemma 3 270M GGUF golden test runs when TF_GEMMA3_GGUF names the file (scripts/fetch_gemma3_gguf.sh
# prints it); .ci/run fetches it first. Without it that one test prints that it skipped.
if [ -z "${TF_GEMMA3_GGUF:-}" ] && [ -f "${XDG_CACHE_HOME:-$HOME/.cache}/tensorfold/models/gemma-3-270m-q4_k_m.gguf" ]; then
    export TF_GEMMA3_GGUF="${XDG_CACHE_HOME:-$HOME/.cache}/tensorfold/models/gemma-3-270m-q4_k_m.gguf"
fi
cargo test --workspace "$@"
# The server through the official `openai` client, using the debug binary built above.
python3 -m pytest -q tests/python
