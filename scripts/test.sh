#!/usr/bin/env bash
# The test command (the README's, and what .ci/run runs after fmt and clippy): sets up what the
# tests need, then runs every test of the workspace. Needs only the Rust toolchain and python3.
#   1. a virtual environment target/pyenv with tests/python/requirements.txt (pinned pytest,
#      openai, NVRTC), made once and reinstalled only when that file changes;
#   2. the Gemma 3 270M demo GGUF in the cache (scripts/fetch_gemma3_gguf.sh), unless
#      TF_GEMMA3_GGUF already names it: its golden test and the chat tests run on it;
#   3. the CUDA kernels compiled by NVRTC for sm_80, sm_89 and sm_90a (no GPU needed), and the
#      cuda crate's import layers checked (scripts/cuda_layers.py);
#   4. the host emulation of the draw kernel built with g++ (scripts/draw_emu.sh --build-only):
#      the draw test that feeds it is one of the ignored tests step 5 runs;
#   5. cargo test --workspace, the ignored real-model tests included (extra arguments are
#      passed to it);
#   6. scripts/fuzz.sh, when it exists (TF_SKIP_FUZZ=1 skips it);
#   7. pytest tests/python from the environment, against the debug binary step 5 built.
# Usage: scripts/test.sh [cargo test arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="target/pyenv"
REQS="tests/python/requirements.txt"
STAMP="$VENV/.tensorfold-requirements"
SYSTEM_PYTHON="${PYTHON:-python3}"

log() { echo "== $*" >&2; }

# Makes $VENV with `python3 -m venv`; where the venv module is missing, with virtualenv.
make_venv() {
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    if ! "$SYSTEM_PYTHON" -m venv "$VENV"; then
        log "python3 -m venv failed; using virtualenv instead"
        rm -rf "$VENV"
        "$SYSTEM_PYTHON" -m pip install -q --user virtualenv
        "$SYSTEM_PYTHON" -m virtualenv -q "$VENV"
    fi
}

# The requirements' hash and the interpreter's version: the environment is up to date iff the
# stamp written after the last successful install says the same.
wanted_stamp() {
    echo "$(sha256sum "$REQS" | cut -d' ' -f1) $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
}

log "python environment ($VENV)"
if ! "$SYSTEM_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "scripts/test.sh needs python3 3.11 or newer; found $("$SYSTEM_PYTHON" --version 2>&1)" >&2
    exit 1
fi
if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    make_venv
fi
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(wanted_stamp)" ]]; then
    echo "up to date with $REQS" >&2
else
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS"
    wanted_stamp > "$STAMP"
fi
PY="$VENV/bin/python"

log "the demo model (Gemma 3 270M Q4_K_M GGUF)"
if [[ -z "${TF_GEMMA3_GGUF:-}" ]]; then
    TF_GEMMA3_GGUF="$(PYTHON="$PY" scripts/fetch_gemma3_gguf.sh)"
fi
export TF_GEMMA3_GGUF
echo "$TF_GEMMA3_GGUF" >&2

log "CUDA kernels compile (NVRTC, no GPU): Ampere, Ada and Hopper targets"
# A passed compile is remembered under target/nvrtc-check by the hash of what it read (kernels,
# nvrtc.rs, the check scripts, the pinned NVRTC), so a second run with no kernel change skips it.
kernels_hash="$(cat crates/cuda/kernels/* crates/cuda/src/nvrtc.rs scripts/nvrtc_check.py scripts/nvrtc_lib.py \
    "$STAMP" | sha256sum | cut -d' ' -f1)"
mkdir -p target/nvrtc-check
for arch in sm_80 sm_89 sm_90a; do
    passed="target/nvrtc-check/$arch-$kernels_hash"
    if [[ -f "$passed" ]]; then
        echo "$arch: compile ok (unchanged since the last check)"
        continue
    fi
    if ! out="$("$PY" scripts/nvrtc_check.py "$arch" 2>&1)"; then
        echo "$out" >&2
        echo "nvrtc_check.py $arch failed" >&2
        exit 1
    fi
    echo "$arch: $(tail -1 <<< "$out")"
    rm -f "target/nvrtc-check/$arch-"*
    touch "$passed"
done

log "the cuda crate's files import one way (scripts/cuda_layers.py)"
if ! out="$("$PY" scripts/cuda_layers.py 2>&1)"; then
    echo "$out" >&2
    exit 1
fi
tail -1 <<< "$out"

log "the draw kernel's host emulation (scripts/draw_emu.sh --build-only, g++)"
scripts/draw_emu.sh --build-only

log "cargo test --workspace"
# The tests marked #[ignore] run too (those on the real GGUF need the file fetched above), except
# write_seed_corpus, which rewrites the committed fuzz corpora. Arguments with their own `--` are
# passed as they are.
cargo_args=("$@")
if [[ " $* " != *" -- "* ]]; then
    cargo_args+=(-- --include-ignored --skip write_seed_corpus)
fi
cargo test --workspace "${cargo_args[@]}"

if [[ -x scripts/fuzz.sh && "${TF_SKIP_FUZZ:-0}" != 1 ]]; then
    log "fuzz targets (scripts/fuzz.sh; TF_SKIP_FUZZ=1 skips)"
    scripts/fuzz.sh
fi

log "pytest tests/python (the server through the official openai client)"
if [[ -z "${TENSORFOLD_BIN:-}" ]]; then
    export TENSORFOLD_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/tensorfold"
fi
"$PY" -m pytest -q tests/python
