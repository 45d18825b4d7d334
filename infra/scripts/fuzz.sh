#!/usr/bin/env bash
# Fuzzes the parsers that take outside input (shared/fuzz, cargo-fuzz on
# nightly): the instant parser, the create payload, the declaration parser,
# cron conversion, webhook verification and the runs-queue message. The
# properties each checks are in shared/src/fuzzing.rs; `cargo test -p shared
# --lib fuzzing` replays the committed corpus on stable (CI does).
#   fuzz.sh                      every target, one after another, 10^7 runs each
#   fuzz.sh <target> [runs]      one target (-1 runs: until stopped)
#   FUZZ_SECONDS=<n> fuzz.sh ... stop each target after n seconds instead
# New inputs go to target/fuzz/corpus/<target> (seeded from the committed
# corpus in shared/fuzz/corpus/<target>); a failing input to
# shared/fuzz/artifacts/<target>/. Commit a failure's input, minimised with
# `cargo +nightly fuzz tmin <target> <file>` (run in shared/), to the
# committed corpus with its fix.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
targets=(instant create declaration cron webhook run_message)
if [ "$#" -gt 0 ]; then targets=("$1"); fi
runs="${2:-10000000}"
# What a fresh machine lacks: the nightly toolchain and cargo-fuzz.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked
limit=()
if [ -n "${FUZZ_SECONDS:-}" ]; then limit=(-max_total_time="$FUZZ_SECONDS"); runs=-1; fi
cd shared
for target in "${targets[@]}"; do
  work="$root/target/fuzz/corpus/$target"
  mkdir -p "$work"
  echo "== fuzz $target"
  cargo +nightly fuzz run --target-dir "$root/target/fuzz" "$target" "$work" "fuzz/corpus/$target" -- \
    -runs="$runs" "${limit[@]}" -timeout=10 -print_final_stats=1
done
