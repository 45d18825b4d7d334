#!/usr/bin/env bash
# Creates a pinned Python venv; re-installs only when its pins change.
#   venv.sh          .venv          moto, cfn-lint, aws-sam-translator, mcp (tests, main job)
#   venv.sh checkov  .venv-checkov  checkov (its boto3 pins clash with SAM CLI's)
#   venv.sh sam      .venv-sam      aws-sam-cli (sam validate, sam build)
#   venv.sh lambda   .venv-lambda   cargo-lambda and its zig (sam build, cargo lambda
#                                   watch/invoke); not needed by the tests
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
case "${1:-main}" in
  main) venv="$root/.venv"; pins="$root/infra/python" ;;
  checkov) venv="$root/.venv-checkov"; pins="$root/infra/python/checkov" ;;
  sam) venv="$root/.venv-sam"; pins="$root/infra/python/sam" ;;
  lambda) venv="$root/.venv-lambda"; pins="$root/infra/python/lambda" ;;
  *) echo "usage: venv.sh [main|checkov|sam|lambda]" >&2; exit 2 ;;
esac
stamp="$venv/.installed"
want="$(cat "$pins/requirements.txt" "$pins/constraints.txt" | sha256sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "Installing pinned Python tools into $(basename "$venv") ..." >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir -r "$pins/requirements.txt" -c "$pins/constraints.txt"
echo "$want" > "$stamp"
