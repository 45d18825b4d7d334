#!/usr/bin/env bash
# Fuzzes the parsers that take outside input (shared/fuzz, cargo-fuzz on
# nightly): the instant parser, the create payload, the declaration parser,
# cron conversion, webhook verification and the runs-queue message. The
# properties each checks are in shared/src/fuzzing.rs; `cargo test -p shared
# --lib fuzzing` replays the committed corpus on stable (CI does).
#   fuzz.sh                      every target, one after another, 10^7 runs each
#   fuzz.sh <target> [runs]      one target (-1 runs: until stopped)
#   FUZZ_SECONDS=<n> fuzz.sh ... stop each target after n seconds instead
# The build goes to $CARGO_TARGET_DIR/fuzz (target/fuzz by
# default), new inputs to corpus/<target> there (seeded from the
# committed corpus in shared/fuzz/corpus/<target>); a failing input to
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
# The largest input each target needs: room past every length bound it
# checks (create: a 4,000-character instruction with the other fields,
# beyond libFuzzer's default 4,096; run_message: ids past their 256), no
# more, so a long run does not spend its time on kilobytes of bytes no
# parser reads.
max_len() {
  case "$1" in
    instant | cron) echo 256 ;;
    webhook | run_message) echo 1024 ;;
    create) echo 8192 ;;
    *) echo 4096 ;;
  esac
}
# AddressSanitizer keeps its heap checks (overflow, use after free); off
# are the allocation stack traces it records on every malloc (only a
# report's detail) and stack use after return, which the project's code
# (unsafe_code = "forbid") cannot commit: about a fifth of each
# execution's CPU.
export ASAN_OPTIONS="${ASAN_OPTIONS:-malloc_context_size=0:detect_stack_use_after_return=0}"
cd shared
build="${CARGO_TARGET_DIR:-$root/target}/fuzz"
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  mkdir -p "$work"
  echo "== fuzz $target"
  cargo +nightly fuzz run --target-dir "$build" "$target" "$work" "fuzz/corpus/$target" -- \
    -runs="$runs" "${limit[@]}" -max_len="$(max_len "$target")" -timeout=10 -print_final_stats=1
done
