#!/usr/bin/env bash
# Benchmarks the release binaries (size, init time, CPU per run) against
# the local stack. Reports figures; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/scripts/venv.sh
cargo build --release --workspace --bins --locked --quiet
exec "${CARGO_TARGET_DIR:-target}/release/bench" "$@"
