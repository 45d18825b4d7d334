#!/usr/bin/env bash
# The main job, locally: installs what it needs, starts moto, creates the
# stack and runs the real function binaries against it (README, SPEC §10).
set -euo pipefail
cd "$(dirname "$0")/../.."
infra/scripts/venv.sh
cargo build --workspace --bins --locked --quiet
exec "${CARGO_TARGET_DIR:-target}/debug/local" "$@"
