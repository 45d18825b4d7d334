#!/usr/bin/env bash
# Fuzzes the parsers that take outside input (shared/fuzz, cargo-fuzz on
# nightly): the instant parser, the create payload, the declaration parser,
# cron conversion, webhook verification, the runs-queue message and the
# owner's schedule input (daily to yearly, until). The
# properties each checks are in shared/src/fuzzing.rs; `cargo test -p shared
# --lib fuzzing` replays the committed corpus on stable (CI does).
#   fuzz.sh                      every target, one after another, 10^7 runs each
#   fuzz.sh <target> [runs]      one target (-1 runs: until stopped)
#   FUZZ_SECONDS=<n> fuzz.sh ... stop each target after n seconds instead
#   FUZZ_SANITIZER=address ...   with AddressSanitizer (default: none)
# The build goes to $CARGO_TARGET_DIR/fuzz (target/fuzz by
# default), new inputs to corpus/<target> there (seeded from the
# committed corpus in shared/fuzz/corpus/<target>); a failing input to
# shared/fuzz/artifacts/<target>/. Commit a failure's input, minimised with
# `cargo +nightly fuzz tmin <target> <file>` (run in shared/), to the
# committed corpus with its fix.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
targets=(instant create declaration cron webhook run_message schedule)
if [ "$#" -gt 0 ]; then targets=("$1"); fi
runs="${2:-10000000}"
# What a fresh machine lacks: the nightly toolchain and cargo-fuzz.
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked
limit=()
if [ -n "${FUZZ_SECONDS:-}" ]; then limit=(-max_total_time="$FUZZ_SECONDS"); runs=-1; fi
# The largest input each target needs: room past every length bound it
# checks (create: a 4,000-character instruction with the other fields,
# beyond libFuzzer's default 4,096; run_message: ids past their 256), no
# more, so a long run does not spend its time on kilobytes of bytes no
# parser reads.
max_len() {
  case "$1" in
    instant | cron | schedule) echo 256 ;;
    webhook | run_message) echo 1024 ;;
    create) echo 8192 ;;
    *) echo 4096 ;;
  esac
}
# No sanitizer by default: the project's code forbids unsafe
# (unsafe_code = "forbid"), so what these targets can find is a panic or a
# broken property, which libFuzzer sees without one, at about three times
# the executions per second AddressSanitizer leaves (10^7 runs of the
# slowest target in minutes, not the better part of an hour).
# FUZZ_SANITIZER=address turns AddressSanitizer on (for the dependencies'
# unsafe code), with its heap checks and without the allocation stack
# traces it records on every malloc (only a report's detail).
sanitizer="${FUZZ_SANITIZER:-none}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-malloc_context_size=0:detect_stack_use_after_return=0}"
cd shared
build="${CARGO_TARGET_DIR:-$root/target}/fuzz"
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  mkdir -p "$work"
  echo "== fuzz $target"
  cargo +nightly fuzz run --sanitizer "$sanitizer" --target-dir "$build" "$target" "$work" "fuzz/corpus/$target" -- \
    -runs="$runs" "${limit[@]}" -max_len="$(max_len "$target")" -timeout=10 -print_final_stats=1
done
