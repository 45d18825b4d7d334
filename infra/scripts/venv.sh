#!/usr/bin/env bash
# Creates .venv with the pinned Python tools: moto (the local AWS), cfn-lint
# and aws-sam-translator. Re-installs only when the pins change.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="$root/.venv"
requirements="$root/infra/python/requirements.txt"
constraints="$root/infra/python/constraints.txt"
stamp="$venv/.installed"
want="$(cat "$requirements" "$constraints" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "Installing the pinned Python tools into .venv ..." >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" -c "$constraints"
echo "$want" > "$stamp"
