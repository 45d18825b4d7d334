#!/usr/bin/env bash
# All checks and tests, on a fresh machine too: the README's test command and
# what CI runs. Installs what it needs (the pinned venv), starts moto per test.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The build needs about 3.5 GB (target, venvs, node packages); say what there is.
echo "== disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free here"
infra/scripts/venv.sh
infra/scripts/node.sh
export PATH="$PWD/.venv/bin:$PATH"
# A one-shot build on a clean clone gains nothing from incremental caches,
# which would double the target directory's size on disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Debug builds keep async state machines unoptimised and move them on the
# stack; the suite's longest scenarios need more than a test thread's 2 MiB.
export RUST_MIN_STACK="${RUST_MIN_STACK:-8388608}"

echo "== format"
cargo fmt --all --check
echo "== clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== the domain builds without the AWS SDK"
cargo check -p shared --no-default-features --locked --quiet
if cargo tree -p shared --no-default-features -e normal --prefix none | grep -q '^aws-'; then
  echo "shared without its aws feature depends on an AWS crate" >&2
  exit 1
fi
echo "== keys.rs is the only module that builds DynamoDB keys"
prefixes='"(WS|TASK|INSTALL|RUN|IDEM|KEY|ACCOUNT|PERIOD|MALFORMED|MSG|WEBHOOK|OWNER|CREATED|SCHEDULABLE|CONNECTOR|PACE|CHECK|BUDGET|REACHED|PROBE|APPROVALS|REQ|JOURNAL)#'
if grep -rnE --include='*.rs' "$prefixes" shared functions infra tests | grep -v '^shared/src/adapters/keys.rs:'; then
  echo "a DynamoDB key prefix is spelled outside shared/src/adapters/keys.rs: build the key with keys::Key" >&2
  exit 1
fi
echo "== the module graph and the environment, as ARCHITECTURE.md's invariants say"
# A check fails when a line names what its module may not: print the lines, say the rule.
forbid() { # rule, pattern, paths...
  local rule="$1" pattern="$2"
  shift 2
  if grep -rnE --include='*.rs' "$pattern" "$@"; then
    echo "$rule" >&2
    exit 1
  fi
}
forbid "adapters never import app" 'crate::app\b' shared/src/adapters
forbid "the domain imports neither app, adapters nor ports" 'crate::(app|adapters|ports)\b' shared/src/domain
forbid "config.rs is the only reader of the environment" 'std::env::var|env::var(_os)?\(|env::vars\(' \
  $(find shared/src functions/*/src -name '*.rs' ! -path shared/src/config.rs)
forbid "Lambda event types and the runtime stay in functions/*" 'aws_lambda_events|lambda_runtime' shared/src
forbid "AWS SDK calls stay in shared/src/adapters" 'aws_sdk_[a-z]+::' \
  $(find shared/src -name '*.rs' ! -path 'shared/src/adapters/*') functions/*/src
# No circle among a folder's modules, no module reaching up to its crate's
# root (infra/python/module_graph.py).
# The domain's groups and the modules within each group alike.
groups=""
for group in shared/src/domain/*/; do groups="$groups|shared/src ${group%/}"; done
IFS='|' read -r -a folders <<< "shared/src shared/src/domain$groups|shared/src shared/src/app|tests/local/src tests/local/src|infra/sat/src infra/sat/src"
for crate_and_folder in "${folders[@]}"; do
  # shellcheck disable=SC2086
  python infra/python/module_graph.py $crate_and_folder
done
echo "== what ships depends on nothing that only tests (ARCHITECTURE, \"Code map\")"
for shipped in create runner reconcile admin schedules sat; do
  if cargo tree -p "$shipped" -e normal --prefix none --locked | cut -d' ' -f1 | grep -qxE 'local|tests'; then
    echo "$shipped depends on the local stack or the test harness outside its dev-dependencies" >&2
    exit 1
  fi
done
echo "== one TLS crypto stack in each function (aws-lc-rs; ring never besides it)"
for function in create runner reconcile admin schedules; do
  crates="$(cargo tree -p "$function" -e normal --prefix none --locked | cut -d' ' -f1 | sort -u)"
  if grep -qx ring <<<"$crates" && grep -qx aws-lc-rs <<<"$crates"; then
    echo "$function links two TLS crypto stacks (ring and aws-lc-rs): cargo tree -p $function -i ring -e normal" >&2
    exit 1
  fi
done
echo "== template: cfn-lint, on the SAM template and on its offline translation; sam validate --lint; checkov"
infra/scripts/venv.sh checkov
infra/scripts/venv.sh sam
cfn-lint template.yaml
mkdir -p target
python infra/python/translate_template.py template.yaml > target/template.translated.json
cfn-lint target/template.translated.json
SAM_CLI_TELEMETRY=0 .venv-sam/bin/sam validate --lint
# Every skipped check carries its reason in the template's Metadata.
.venv-checkov/bin/checkov --skip-download --quiet --compact -f template.yaml
echo "== tests"
# The simulation's slice explores seeds of this commit too (tests/tests/suite/sim.rs):
# printed here and with the slice's table, replayable with the line printed.
SIM_COMMIT="$(git rev-parse HEAD 2>/dev/null || echo 000000000000)"
export SIM_COMMIT
echo "sim: this commit's seeds derive from ${SIM_COMMIT}; a failure prints its replay command"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# Every function request the local stack's moto allows, for the report of
# grants no test used (infra/python/local_iam.py).
export LOCAL_IAM_USED="$PWD/target/iam-used.txt" LOCAL_IAM_REFUSED="$PWD/target/iam-refused.txt"
rm -f "$LOCAL_IAM_USED" "$LOCAL_IAM_REFUSED"
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# Date rot is caught here, not by the calendar: the suites that move
# through time run again with the process clock (and every child's: moto,
# the function binaries) moved a month and a year ahead (docs/testing.md).
echo "== the time-sensitive suites again, with the clock moved ahead (libfaketime)"
faketime_lib="$(infra/scripts/faketime.sh)"
suite="$(cargo test -p tests --test suite --locked --no-run --message-format=json 2>/dev/null |
  python -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable") and m["target"]["name"] == "suite"][0])')"
for ahead in +30d +365d; do
  echo "clock moved $ahead: upgrade, lifecycle, overdue"
  (cd tests && LD_PRELOAD="$faketime_lib" FAKETIME="$ahead" FAKETIME_DONT_FAKE_MONOTONIC=1 \
    "$suite" upgrade lifecycle overdue) 2>&1 | tee -a "$log" || status=$?
done
python infra/python/local_iam.py "$LOCAL_IAM_USED" || true
# A request a function's role does not allow fails the suite, even where
# the function took the refusal in its stride (a best-effort write).
if [ -s "$LOCAL_IAM_REFUSED" ]; then
  echo "IAM: requests the functions' roles in template.yaml do not allow (function action):" >&2
  sort -u "$LOCAL_IAM_REFUSED" >&2
  status=1
fi
# One closing line over every test binary: cargo's last line is a doc-test
# run that may count none.
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
exit "$status"
