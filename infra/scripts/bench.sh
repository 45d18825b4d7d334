#!/usr/bin/env bash
# The benchmarks (docs/benchmarks.md): DynamoDB requests per operation,
# the daily pass's requests and time per invocation, cold start (process
# start to the first answered invocation) beside a bare lambda_runtime
# binary, instructions per create, run and reconcile pass under callgrind,
# and each function's release binary size. Prints the tables, writes
# target/bench.json, and writes each measured section of docs/benchmarks.md
# (between its `bench:` markers), stamped with the command, commit and
# machine. Reports figures; asserts nothing.
#
#   bench.sh [--invocations N] [--starts K] [--runs R]
#            [--only requests,passes,cold,instructions,sizes]   (binaries: the last three)
#
# The pass figures alone need neither valgrind nor the release builds:
#   cargo build -p tests --bin bench && target/debug/bench --only passes
#
# Sizes are of the arm64 release build (what template.yaml deploys) when
# cargo-lambda is on PATH or in .venv-lambda (`infra/scripts/venv.sh
# lambda`, and `rustup target add aarch64-unknown-linux-gnu`), else of the
# host's bench-sym build stripped (the release code);
# the table says which.
# Callgrind and cold start run the host build of the `bench-sym` profile
# (release with line tables and symbols). Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$root/target}"
infra/scripts/venv.sh
export PATH="$root/.venv/bin:$PATH"
if [ -x "$root/.venv-lambda/bin/cargo-lambda" ]; then
  export PATH="$root/.venv-lambda/bin:$PATH"
fi
command -v valgrind >/dev/null || { echo "bench.sh needs valgrind (callgrind)" >&2; exit 2; }

functions=(-p create -p runner -p reconcile -p admin -p schedules)
echo "bench: building the functions and bare_lambda (profile bench-sym) ..." >&2
cargo build --locked --quiet --profile bench-sym "${functions[@]}" -p bare_lambda
# The arm64 build needs the Rust target beside cargo-lambda's zig.
arm64_std="$(rustc --print sysroot)/lib/rustlib/aarch64-unknown-linux-gnu"
if command -v cargo-lambda >/dev/null && [ -d "$arm64_std" ]; then
  echo "bench: building the functions for arm64 (release, cargo-lambda) ..." >&2
  cargo lambda build --locked --quiet --release --arm64 "${functions[@]}"
  # cargo-lambda leaves each binary as lambda/<function>/bootstrap.
  sizes="$target/lambda"
  # Position-independent, as every binary is (ARCHITECTURE, "Start"), through zig too.
  for f in create runner reconcile admin schedules; do
    readelf -h "$sizes/$f/bootstrap" | grep -q 'Type:[[:space:]]*DYN' || {
      echo "bench: $sizes/$f/bootstrap is not a position-independent executable" >&2
      exit 1
    }
  done
  arch="arm64 (aarch64-unknown-linux-gnu, release)"
else
  # The host's release binaries are the bench-sym ones stripped: the same
  # code (line tables do not change codegen), without a second fat-LTO
  # build of the SDK.
  echo "bench: cargo-lambda or the aarch64-unknown-linux-gnu target not found: sizes are of the host's build, stripped" >&2
  sizes="$target/bench-sizes"
  mkdir -p "$sizes"
  for f in create runner reconcile admin schedules; do
    strip --strip-all -o "$sizes/$f" "$target/bench-sym/$f"
  done
  arch="$(uname -m) (host: the bench-sym build stripped, as release strips; no arm64 build here)"
fi
# The workspace's feature set, as the tests build it: no second debug build of the SDK.
cargo build --locked --quiet --workspace --bin bench
export RUST_MIN_STACK=8388608
exec "$target/debug/bench" --functions "$target/bench-sym" --sizes "$sizes" --arch "$arch" \
  --out "$target/bench.json" --doc "$root/docs/benchmarks.md" "$@"
