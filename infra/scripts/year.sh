#!/usr/bin/env bash
# A year of a workspace on a virtual clock (tests/src/year.rs): minute,
# hourly, daily, monthly and weekly tasks and reminders through 365 days of
# budgets spent and raised, the worker off, late deliveries, undecided
# approvals, an install come and gone, expiry and TTL. Prints one table;
# non-zero when anything that must hold did not. CI runs the shortened year
# (the suite's bounded::a_year_of_a_workspace_keeps_every_item_and_the_table_bounded).
#   infra/scripts/year.sh [--short] [--doc]
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/scripts/venv.sh
export PATH="$PWD/.venv/bin:$PATH"
export RUST_MIN_STACK=8388608
cargo build --profile harness -p tests --bin year --locked --quiet
exec "${CARGO_TARGET_DIR:-target}/harness/year" "$@"
