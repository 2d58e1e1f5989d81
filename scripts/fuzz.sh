#!/usr/bin/env bash
# Runs every cargo-fuzz target in the workspace (each crates/*/fuzz) for a fixed time from its
# committed seed corpus; exits non-zero if any target crashes, panics or fails to build.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]    SECONDS per target (default $FUZZ_SECONDS or 60)
#
# Seeds for target T of crate C: C/tests/corpus/T/ (or C/fuzz/seeds/T/). They are copied into a
# temporary working corpus, so the checkout is not written; a crashing input is kept under
# target/fuzz-artifacts/T/ (or $FUZZ_ARTIFACTS). libFuzzer runs with -seed=1. cargo-fuzz is
# installed when missing; it runs on stable through RUSTC_BOOTSTRAP=1 with `-s none` (no
# sanitizer: the fuzzed parsers are safe Rust, and ASan would double build and run times).
# Built from a clean checkout, installing cargo-fuzz included, it takes about 9 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-60}}
[[ $# -gt 0 ]] && shift
only=("$@")
artifacts=${FUZZ_ARTIFACTS:-$PWD/target/fuzz-artifacts}
export RUSTC_BOOTSTRAP=1
# One target directory for every fuzz workspace (their shared dependencies, libFuzzer's C++
# among them, build once) and 16 codegen units: a third of the one-unit build time on 2 cores.
build=(-s none --codegen-units 16 --target-dir "$PWD/target/fuzz")

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
ran=0
for manifest in crates/*/fuzz/Cargo.toml; do
    crate=${manifest%/fuzz/Cargo.toml}
    targets=()
    for target in $(cd "$crate" && cargo fuzz list); do
        if [[ ${#only[@]} -eq 0 || " ${only[*]} " == *" $target "* ]]; then
            targets+=("$target")
        fi
    done
    [[ ${#targets[@]} -eq 0 ]] && continue
    echo "== building the fuzz targets of $crate"
    if ! (cd "$crate" && cargo fuzz build "${build[@]}"); then
        failed+=("$crate (build)")
        continue
    fi
    for target in "${targets[@]}"; do
        corpus="$work/${crate##*/}-$target"
        mkdir -p "$corpus" "$artifacts/$target"
        seeds=""
        for dir in "$crate/tests/corpus/$target" "$crate/fuzz/seeds/$target"; do
            [[ -d $dir ]] && seeds=$dir && break
        done
        if [[ -n $seeds ]]; then
            cp -R "$seeds/." "$corpus/"
        else
            echo "warning: $crate target $target has no seed corpus (looked in tests/corpus/$target)"
        fi
        echo "== fuzzing $target ($crate) for ${seconds}s from ${seeds:-nothing} ($(ls "$corpus" | wc -l) seeds)"
        ran=$((ran + 1))
        # The per-input progress lines are dropped; the status is the fuzzer's (pipefail).
        if ! (cd "$crate" && cargo fuzz run "${build[@]}" "$target" "$corpus" -- \
            -seed=1 -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/$target/" \
            2>&1 | { grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' || true; }); then
            failed+=("$target")
            echo "!! $target crashed; the input is under $artifacts/$target/"
        fi
    done
done

if [[ $ran -eq 0 && ${#failed[@]} -eq 0 ]]; then
    echo "no fuzz target ran (asked for: ${only[*]:-all})"
    exit 1
fi
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "fuzz: FAILED: ${failed[*]}"
    exit 1
fi
echo "fuzz: $ran target(s) ran ${seconds}s each without a crash (${SECONDS}s in all)"
