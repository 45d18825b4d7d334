#!/usr/bin/env bash
# Writes tests/upgrade/<release>.json: the table and the Scheduler group as
# the release's own code leaves them (tests/upgrade/generate.rs, compiled
# into that release's suite in a worktree and run against its local
# stack). tests/tests/suite/upgrade.rs deploys this release over it.
#
#   infra/scripts/upgrade-fixture.sh [release commit]   (default: the last release)
#
# Shares this checkout's target directory (the release's crates build
# beside this one's; the SDK's are reused) and its venv and node packages.
set -euo pipefail
release="${1:-57349f9}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/release" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add --detach "$work/release" "$release" >/dev/null
cp "$root/tests/upgrade/generate.rs" "$work/release/tests/tests/suite/upgrade_fixture.rs"
echo "mod upgrade_fixture;" >> "$work/release/tests/tests/suite/main.rs"
ln -s "$root/.venv" "$work/release/.venv"
ln -s "$root/infra/node/node_modules" "$work/release/infra/node/node_modules"
full="$(git -C "$root" rev-parse "$release")"
out="$root/tests/upgrade/${full:0:7}.json"
(
  cd "$work/release"
  export CARGO_TARGET_DIR="$root/target" RUST_MIN_STACK=8388608 CARGO_INCREMENTAL=0
  UPGRADE_FIXTURE_OUT="$out" UPGRADE_FIXTURE_RELEASE="$full" \
    cargo test -p tests --test suite upgrade_fixture -- --exact upgrade_fixture::write_the_upgrade_fixture --nocapture
)
test -s "$out"
echo "wrote $out"
