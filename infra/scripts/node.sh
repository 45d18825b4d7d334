#!/usr/bin/env bash
# Installs the third-party MCP servers the tests run (infra/node, pinned by
# its lock file). Re-installs only when the lock file changes.
set -euo pipefail
dir="$(cd "$(dirname "$0")/../node" && pwd)"
stamp="$dir/node_modules/.installed"
want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "Installing the pinned npm packages into infra/node ..." >&2
(cd "$dir" && npm ci --no-audit --no-fund --silent)
echo "$want" > "$stamp"
