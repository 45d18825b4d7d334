#!/usr/bin/env bash
# The herd: connector tasks all due at one instant against a model quota
# per minute, on a compressed clock (tests/src/herd.rs). Prints one table
# and exits non-zero when an invariant fails.
#   infra/scripts/herd.sh [--tasks N] [--reminders M] [--rpm R] [--pace P] [--compression C] [--concurrency K] [--batch B] [--duplicate-every D]
# (--pace: the runner's model pace, requests per minute; R unless given, 0 for none)
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"
cargo build --profile harness -p tests --bin herd --locked --quiet
exec "${CARGO_TARGET_DIR:-target}/harness/herd" "$@"
