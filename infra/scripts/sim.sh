#!/usr/bin/env bash
# The seeded fault simulation (tests/src/sim.rs): the real runner use case on
# moto, the rmcp fixture and the Converse stand-in, under generated faults.
# Prints one table and exits non-zero when a check finds a violation; one
# seed (--seeds 17..17) also prints its fault schedule.
#   infra/scripts/sim.sh [--seeds A..B] [--size N] [--per-task M] [--concurrency K] [--parallel P] [--schedule] [--tamper]
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"
cargo build --profile harness -p tests --bin sim --locked --quiet
exec "${CARGO_TARGET_DIR:-target}/harness/sim" "$@"
