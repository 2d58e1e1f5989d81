#!/usr/bin/env bash
# The test command a newcomer runs (and CI runs through .ci/run): every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace "$@"
