#!/usr/bin/env bash
# After `sam deploy`: verify the live stack end to end with `sat verify`
# (a reminder due in two minutes created through the create function, its
# run on the model, its event on RunFinishedQueue, a 20-hop chain through
# the reconcile queue past Lambda's loop detection, and the functions'
# spans in aws/spans) and print what was verified.
# Exit status: 0 verified, 3 a step failed, 1 an error.
#
#   infra/scripts/deploy-check.sh [--stack NAME] [--region R] [--profile P] [sat verify options]
#
# The stack defaults to samconfig.toml's stack_name; credentials come from
# the usual AWS chain (environment, profile, SSO, credential_process).
set -euo pipefail
cd "$(dirname "$0")/../.."
args=("$@")
if [[ " ${args[*]-} " != *" --stack "* ]]; then
  stack="$(sed -n 's/^stack_name *= *"\(.*\)"/\1/p' samconfig.toml | head -1)"
  args=(--stack "$stack" "${args[@]}")
fi
exec cargo run --quiet --locked -p sat -- verify "${args[@]}"
