"""IAM per action for the local stack's functions, as AWS evaluates it.

moto checks no IAM: a function whose role lacks an action works locally and
is refused on AWS. The local stack gives each function process an access key
naming its template resources (`iam-RunnerFunction`; the local reconcile
process is both intake and worker: `iam-ReconcileFunction+WebhookFunction`,
see `tests/local/src/runtime.rs`). A request signed with such a key is
allowed only when one of those functions' policy statements in
`template.yaml` allows its action, and refused as AWS refuses it otherwise
(`AccessDeniedException`). Other keys (the tests' own clients, the local
dispatcher) are not checked.

What AWS authorises, and so what is checked here:
- one action per request, `<service>:<operation>`, the service from the
  request's SigV4 credential scope;
- `TransactWriteItems` and `TransactGetItems` per contained action: a `Put`
  needs `dynamodb:PutItem`, an `Update` `dynamodb:UpdateItem`, a `Delete`
  `dynamodb:DeleteItem`, a `ConditionCheck` `dynamodb:ConditionCheckItem`,
  a `Get` `dynamodb:GetItem`;
- Scheduler's REST operations by method and path.
Statements' conditions (`!If`) count as on, `Resource` is not compared
(action level only; FIDELITY.md says so), wildcards in actions are honoured.

With `LOCAL_IAM_USED` naming a file, each (function, action) allowed is
appended to it once per moto process, and `python local_iam.py <file>`
prints the actions each role is granted that no request used (least
privilege the other way; `infra/scripts/test.sh` prints it after the tests).
"""

import fnmatch
import json
import os

import yaml

ROLE_PREFIX = "iam-"
_TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "template.yaml")


class _Loader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags, kept as `{"Fn::<tag>": value}`."""


def _tagged(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {"Fn::" + suffix: value}


_Loader.add_multi_constructor("!", _tagged)


def _statements(value):
    """Every statement in a policy, through `!If` (both branches)."""
    if isinstance(value, list):
        for item in value:
            yield from _statements(item)
    elif isinstance(value, dict):
        if "Fn::If" in value:
            branches = value["Fn::If"]
            for branch in branches[1:] if isinstance(branches, list) else []:
                yield from _statements(branch)
        elif "Statement" in value:
            yield from _statements(value["Statement"])
        elif "Effect" in value and "Action" in value:
            yield value


def allowed_actions(template_text):
    """{function resource: [allowed action patterns]} from a template."""
    template = yaml.load(template_text, Loader=_Loader)
    out = {}
    for name, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        actions = []
        for statement in _statements((resource.get("Properties") or {}).get("Policies") or []):
            if statement.get("Effect") != "Allow":
                continue
            action = statement["Action"]
            actions.extend(action if isinstance(action, list) else [action])
        out[name] = [a.lower() for a in actions if isinstance(a, str)]
    return out


_policies = None


def _policies_now():
    global _policies
    if _policies is None:
        with open(_TEMPLATE, encoding="utf-8") as f:
            _policies = allowed_actions(f.read())
    return _policies


def _credential(environ):
    """(access key, service) from the request's SigV4 Authorization header."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    marker = "Credential="
    at = auth.find(marker)
    if at < 0:
        return None, None
    scope = auth[at + len(marker):].split(",")[0].split("/")
    if len(scope) < 4:
        return None, None
    return scope[0], scope[3]


_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _scheduler_operation(method, path):
    parts = [p for p in path.split("/") if p]
    if not parts:
        return None
    if parts[0] == "schedules":
        if len(parts) == 1:
            return "ListSchedules"
        return {"POST": "CreateSchedule", "PUT": "UpdateSchedule", "DELETE": "DeleteSchedule", "GET": "GetSchedule"}.get(method)
    if parts[0] == "schedule-groups":
        if len(parts) == 1:
            return "ListScheduleGroups"
        return {"POST": "CreateScheduleGroup", "DELETE": "DeleteScheduleGroup", "GET": "GetScheduleGroup"}.get(method)
    if parts[0] == "tags":
        return {"POST": "TagResource", "DELETE": "UntagResource", "GET": "ListTagsForResource"}.get(method)
    return None


def _read_body(environ):
    import io

    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def actions_of(environ, service):
    """The IAM actions one request needs, as AWS authorises it."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        operation = target.rsplit(".", 1)[-1]
        if service == "dynamodb" and operation in ("TransactWriteItems", "TransactGetItems"):
            try:
                request = json.loads(_read_body(environ) or b"{}")
            except ValueError:
                request = {}
            needed = []
            for item in request.get("TransactItems") or []:
                for kind in item if isinstance(item, dict) else []:
                    if kind in _TRANSACT:
                        needed.append("dynamodb:" + _TRANSACT[kind])
            return needed or ["dynamodb:" + operation]
        return [f"{service}:{operation}"]
    if service == "scheduler":
        operation = _scheduler_operation(environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", ""))
        return [f"scheduler:{operation}"] if operation else []
    # SQS's query protocol, should a client use it.
    if service == "sqs":
        from urllib.parse import parse_qs

        body = _read_body(environ).decode("utf-8", "replace")
        action = parse_qs(body).get("Action", [""])[0]
        return [f"sqs:{action}"] if action else []
    return []


_used = set()


def _record_use(functions, action):
    path = os.environ.get("LOCAL_IAM_USED")
    if not path or (tuple(functions), action) in _used:
        return
    _used.add((tuple(functions), action))
    try:
        with open(path, "a", encoding="utf-8") as f:
            for function in functions:
                f.write(f"{function} {action.lower()}\n")
    except OSError:
        pass


# A role key ending so is checked the same, by a test that expects its
# refusals (`tests/local/tests/iam.rs`): they are not recorded as the
# suite's failures.
PROBE_SUFFIX = "~probe"


def denied(environ):
    """(function, action, probe) a request is refused for, or None when allowed."""
    key, service = _credential(environ)
    if not key or not key.startswith(ROLE_PREFIX) or not service:
        return None
    probe = key.endswith(PROBE_SUFFIX)
    key = key[: -len(PROBE_SUFFIX)] if probe else key
    functions = key[len(ROLE_PREFIX):].split("+")
    policies = _policies_now()
    allowed = [a for f in functions for a in policies.get(f, [])]
    for action in actions_of(environ, service):
        if not any(fnmatch.fnmatchcase(action.lower(), pattern) for pattern in allowed):
            return "+".join(functions), action, probe
        if not probe:
            _record_use(functions, action)
    return None


def unused_report(used_path):
    """Lines naming each granted action no recorded request used."""
    used = set()
    try:
        with open(used_path, encoding="utf-8") as f:
            used = {tuple(line.split()) for line in f if line.strip()}
    except OSError:
        pass
    out = []
    # Bedrock, Marketplace and the traces endpoint are not moto's (stand-ins
    # or not modelled), and iam:PassRole is checked inside CreateSchedule:
    # their grants never show a use here.
    elsewhere = ("bedrock:", "aws-marketplace:", "xray:", "iam:")
    for function, actions in sorted(_policies_now().items()):
        actions = [a for a in actions if not a.startswith(elsewhere)]
        # The local reconcile process is both functions: a use counts for each.
        never = sorted({a for a in actions if not any(u[1] == a for u in used if u[0] == function)})
        if never:
            out.append(f"{function}: {', '.join(never)}")
    return out


if __name__ == "__main__":
    import sys

    lines = unused_report(sys.argv[1])
    print("IAM actions granted that no function request in the tests used (least privilege both ways;")
    print("Bedrock, Marketplace, X-Ray and iam:PassRole are not served by moto and not listed):")
    for line in lines or ["none"]:
        print("  " + line)


def refuse(environ, start_response, function, action, probe=False):
    """AWS's answer to an action the role lacks; noted in `LOCAL_IAM_REFUSED`."""
    path = os.environ.get("LOCAL_IAM_REFUSED")
    if path and not probe:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{function} {action}\n")
        except OSError:
            pass
    message = (
        f"User: arn:aws:sts::123456789012:assumed-role/{function}Role/local is not authorized to perform: "
        f"{action} because no identity-based policy allows the {action} action"
    )
    if environ.get("HTTP_X_AMZ_TARGET"):
        body = {"__type": "com.amazon.coral.service#AccessDeniedException", "message": message, "Message": message}
        start_response(
            "400 Bad Request",
            [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-ErrorType", "AccessDeniedException")],
        )
        return [json.dumps(body).encode()]
    start_response(
        "403 Forbidden",
        [("Content-Type", "application/json"), ("x-amzn-ErrorType", "AccessDeniedException")],
    )
    return [json.dumps({"Message": message}).encode()]
