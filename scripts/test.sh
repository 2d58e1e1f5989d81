#!/usr/bin/env bash
# The test command a newcomer runs (and CI runs through .ci/run): every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace "$@"
# The server through the official `openai` client, using the debug binary built above.
python3 -m pytest -q tests/python
