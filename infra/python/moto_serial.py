"""moto's server, answering one request at a time.

moto applies a DynamoDB conditional write as a read and a write that another
request thread can interleave with; DynamoDB applies each conditional write
(and each transaction) atomically. The runner's claim relies on that, so the
local stack serialises requests: threads and keep-alive stay, the backends see
one request at a time. Same arguments as moto_server (-H HOST -p PORT).

It also gives SQS a clock that tests can move (see `_clock`), and keeps
DynamoDB's `ClientRequestToken` promise for `TransactWriteItems`, which moto
ignores (see `_transaction_token`), and backs up only what a transaction
can change instead of every table it names (see `_transact_write_items`),
and reads one partition for a query of a table's key (see `_QueryView`).
It deletes what DynamoDB's TTL would have deleted by a time a test names
(see `_expire`). And it refuses a function's request its role in `template.yaml` does not
allow, as AWS does and moto does not (`local_iam.py`), and lists moto's
package folder once rather than for every request it routes (see
`_moto_modules`).
"""

import io
import json
import threading
import time

import copy

import local_iam
import moto.backends as backends
import moto.dynamodb.models as dynamodb_models
import moto.server as server
import moto.sqs.models as sqs_models
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table

_lock = threading.Lock()
_run_simple = server.run_simple

# SQS's clock, which tests move forward. moto hides a received message until
# its visibility timeout passes on the wall clock; a test cannot wait the
# runs queue's 2160 s, and one that made the message visible at once would
# hide the defect that matters (a returned message comes back only after its
# visibility). POST /_local/sqs-clock?advance=<seconds> moves this clock:
# visibility, delays and retention then follow it as they follow time on AWS,
# and so does a sent message's `SentTimestamp`. ?set=<seconds> puts it at an
# offset (the dispatcher's fast-forward sends an occurrence at its time).
_sqs_offset_seconds = 0.0
_unix_time = sqs_models.unix_time
_unix_time_millis = sqs_models.unix_time_millis


def _sqs_unix_time(dt=None):
    return _unix_time(dt) + (0.0 if dt is not None else _sqs_offset_seconds)


def _sqs_unix_time_millis(dt=None):
    return _unix_time_millis(dt) + (0.0 if dt is not None else _sqs_offset_seconds * 1000.0)


sqs_models.unix_time = _sqs_unix_time
sqs_models.unix_time_millis = _sqs_unix_time_millis


def _clock(environ, start_response):
    global _sqs_offset_seconds
    from urllib.parse import parse_qs

    query = parse_qs(environ.get("QUERY_STRING", ""))
    try:
        advance = float(query.get("advance", ["0"])[0])
        offset = float(query["set"][0]) if "set" in query else None
    except ValueError:
        advance, offset = -1.0, None
    if (
        environ.get("REQUEST_METHOD") != "POST"
        or not 0.0 <= advance <= 1_209_600.0
        or (offset is not None and not 0.0 <= offset <= 40_000_000.0)
    ):
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"POST /_local/sqs-clock?advance=<0..1209600 seconds> or ?set=<0..40000000 seconds>"]
    # `set` puts the clock at an offset from the wall's, back too: the
    # dispatcher sends a fast-forwarded occurrence at its own time, then
    # puts the clock back where it was.
    _sqs_offset_seconds = offset if offset is not None else _sqs_offset_seconds + advance
    start_response("200 OK", [("Content-Type", "application/json")])
    return [('{"offset_seconds": %s}' % _sqs_offset_seconds).encode()]


# DynamoDB makes TransactWriteItems with a ClientRequestToken idempotent for
# 10 minutes after the first request with it completes: a repeat of a
# transaction that succeeded succeeds without writing again, and the same
# token with other parameters is IdempotentParameterMismatchException. moto
# ignores the token and runs a repeat again (the SDK repeats a request whose
# answer timed out; the runner's settle and release rely on the token).
_TOKEN_SECONDS = 600.0
_tokens = {}


def _transaction_token(environ):
    """(key, parameters) of a TransactWriteItems request with a token, or None.

    Reads the body only of such requests, and puts it back for moto."""
    if not environ.get("HTTP_X_AMZ_TARGET", "").endswith(".TransactWriteItems"):
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    try:
        request = json.loads(body)
    except ValueError:
        return None
    token = request.pop("ClientRequestToken", None) if isinstance(request, dict) else None
    if not token:
        return None
    key = (environ.get("HTTP_X_MOTO_ACCOUNT_ID", ""), token)
    return key, request


def _transaction(environ, start_response, app):
    found = _transaction_token(environ)
    if found is None:
        return list(app(environ, start_response))
    key, request = found
    now = time.monotonic()
    seen = _tokens.get(key)
    if seen is not None and seen[0] > now:
        _, parameters, status, headers, body = seen
        if parameters != request:
            start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
            message = {
                "__type": "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                "message": "The request uses the same client token as a previous, but non-identical request.",
            }
            return [json.dumps(message).encode()]
        start_response(status, headers)
        return [body]
    answer = {}

    def capture(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, list(headers)
        return start_response(status, headers, exc_info)

    out = list(app(environ, capture))
    if answer.get("status", "").startswith("200"):
        if len(_tokens) > 10_000:
            for old in [k for k, v in _tokens.items() if v[0] <= now]:
                del _tokens[old]
        _tokens[key] = (time.monotonic() + _TOKEN_SECONDS, request, answer["status"], answer["headers"], b"".join(out))
    return out


# moto's TransactWriteItems deep-copies each table it names, once per item,
# to put the copy back if the transaction is cancelled: every transaction
# costs the whole table (its items and its stream's records) in time and
# memory, and the copies hold reference cycles (a stream points back at its
# table) that only the cycle collector frees. A long simulation's moto grew
# by about 30 MB a second until the kernel killed it, and each request took
# longer as the table grew. Requests here run one at a time (`Serial`), so
# the backup is what the transaction can change: the items it names and the
# length of each table's stream. moto's own rollback then puts the same
# table back (its "copy" is the table itself) and this one restores the
# items and drops the stream records of the writes it undid: a cancelled
# transaction leaves the table and its stream as they were, as on AWS.
class _TablesNotCopied:
    """`copy` as moto's DynamoDB backend module sees it: a Table is not copied."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value, memo=None):
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, memo)


dynamodb_models.copy = _TablesNotCopied()
_moto_transact_write_items = dynamodb_models.DynamoDBBackend.transact_write_items


def _named_item(backend, item):
    """(table, hash key, range key) of one transaction item, or None."""
    try:
        op_type, op = next(iter(item.items()))
        table = backend.tables.get(op.get("TableName"))
        if table is None:
            return None
        key = op["Item"] if op_type == "Put" else op["Key"]
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        return table, hash_key, range_key
    except (AttributeError, KeyError, StopIteration, TypeError):
        return None


def _put_back(table, hash_key, range_key, before):
    if range_key is None:
        if before is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = before
    elif before is None:
        table.items.get(hash_key, {}).pop(range_key, None)
        if hash_key in table.items and not table.items[hash_key]:
            del table.items[hash_key]
    else:
        table.items[hash_key][range_key] = before


def _transact_write_items(self, transact_items):
    backup = []
    streams = {}
    for item in transact_items if isinstance(transact_items, list) else []:
        named = _named_item(self, item)
        if named is None:
            continue
        table, hash_key, range_key = named
        try:
            before = table.get_item(hash_key, range_key)
        except Exception:
            continue
        backup.append((table, hash_key, range_key, copy.deepcopy(before)))
        if table.stream_shard is not None:
            streams.setdefault(id(table), (table, len(table.stream_shard.items)))
    try:
        return _moto_transact_write_items(self, transact_items)
    except Exception:
        for table, hash_key, range_key, before in reversed(backup):
            _put_back(table, hash_key, range_key, before)
        for table, length in streams.values():
            del table.stream_shard.items[length:]
        raise


dynamodb_models.DynamoDBBackend.transact_write_items = _transact_write_items


# A query of a table's own key reads one partition on DynamoDB; moto's reads
# and sorts every item of the table and keeps those of the partition
# (`Table.query` through `all_items`), so a check that queries each of
# 20,000 tasks' records took hours. This hands moto's query the partition
# alone: the same items, in the same order, whatever the table holds. A
# query of an index still reads every item (moto keeps no index), unsorted:
# moto sorts what it keeps by the index's keys and the table's, a total
# order, so the sort of the whole table before it changes nothing.
class _QueryView:
    """A table as moto's `query` sees it: `hash_key`'s items, or all of
    them unsorted (`hash_key` None)."""

    def __init__(self, table, hash_key):
        self._table = table
        self._hash_key = hash_key

    def __getattr__(self, name):
        return getattr(self._table, name)

    def _items_of(self, bucket):
        return list(bucket.values()) if self._table.range_key_attr else [bucket]

    def all_items(self):
        if self._hash_key is None:
            return [item for bucket in self._table.items.values() for item in self._items_of(bucket)]
        bucket = self._table.items.get(self._hash_key)
        return [] if bucket is None else self._items_of(bucket)


_moto_query = Table.query


def _query(self, hash_key, *args, **kwargs):
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    if index_name is not None:
        return _moto_query(_QueryView(self, None), hash_key, *args, **kwargs)
    if hash_key is not None:
        return _moto_query(_QueryView(self, hash_key), hash_key, *args, **kwargs)
    return _moto_query(self, hash_key, *args, **kwargs)


Table.query = _query


# SQS keeps the trace header a request was sent with (`X-Amzn-Trace-Id`,
# which the SDK copies from a Lambda invocation's `_X_AMZN_TRACE_ID`) as the
# message's `AWSTraceHeader`; Lambda's recursive loop detection reads the
# lineage in it. moto keeps an `AWSTraceHeader` given as a system attribute
# only: this gives it the header's, as SQS does.
def _carry_trace_header(environ):
    trace = environ.get("HTTP_X_AMZN_TRACE_ID")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if not trace or target not in ("AmazonSQS.SendMessage", "AmazonSQS.SendMessageBatch"):
        return
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    try:
        request = json.loads(body)
        attribute = {"DataType": "String", "StringValue": trace}
        entries = request.get("Entries", []) if target.endswith("Batch") else [request]
        for entry in entries:
            entry.setdefault("MessageSystemAttributes", {}).setdefault("AWSTraceHeader", attribute)
        body = json.dumps(request).encode()
    except (ValueError, AttributeError):
        pass
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


# moto's server routes each request by asking whether its host names one of
# moto's service packages, and lists its package folder to answer, once a
# request: a `listdir` and a `stat` per entry, a large part of what moto
# spends on a `GetSecretValue` or a `GetItem`. The folder does not change
# while the server runs, so it is listed once: the same names, routed the
# same way (`tests/local/tests/moto.rs` counts the listings).
# No AWS service spends that time, and it falls on every request, cold or
# warm, the webhook intake's secret read too (docs/benchmarks.md).
_moto_modules = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _moto_modules


# DynamoDB answers TransactionConflictException to a plain write
# (PutItem, UpdateItem, DeleteItem) of an item a transaction is writing at
# that moment; moto, one request at a time, never does. POST
# /_local/dynamodb-conflict with {"pk": <partition key>, "count": n} makes
# the next n plain writes of that partition meet one (nothing written), as
# a transaction racing them would (a count of 0 disarms the partition); GET it answers how many are left, GET
# /_local/dynamodb-conflict?met how many writes met one since the start.
_conflicts = {}
_conflicts_met = [0]
_PLAIN_WRITES = ("DynamoDB_20120810.PutItem", "DynamoDB_20120810.UpdateItem", "DynamoDB_20120810.DeleteItem")


def _arm_conflicts(environ, start_response):
    if environ.get("QUERY_STRING") == "met":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"met": _conflicts_met[0]}).encode()]
    if environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        try:
            armed = json.loads(environ["wsgi.input"].read(length) or b"{}")
            count = int(armed.get("count", 1))
            if count > 0:
                _conflicts[str(armed["pk"])] = count
            else:
                _conflicts.pop(str(armed["pk"]), None)
        except (ValueError, KeyError, TypeError):
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b'POST /_local/dynamodb-conflict {"pk": "<partition key>", "count": <n>}']
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(_conflicts).encode()]


def _conflict(environ, start_response):
    """The armed conflict's answer to a plain write of its partition, or None."""
    if not _conflicts or environ.get("HTTP_X_AMZ_TARGET", "") not in _PLAIN_WRITES:
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    try:
        request = json.loads(body)
        attributes = request.get("Key") or request.get("Item") or {}
        pk = attributes.get("pk", {}).get("S")
    except (ValueError, AttributeError):
        return None
    if not _conflicts.get(pk):
        return None
    _conflicts[pk] -= 1
    _conflicts_met[0] += 1
    if not _conflicts[pk]:
        del _conflicts[pk]
    start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
    message = {
        "__type": "com.amazonaws.dynamodb.v20120810#TransactionConflictException",
        "message": "Transaction is ongoing for the item",
    }
    return [json.dumps(message).encode()]


# DynamoDB's TTL deletes an item some time after its TTL attribute (a
# number of Unix seconds) has passed, "typically within a few days", as a
# delete of the service's own: it leaves the table and its indexes, and the
# stream carries a REMOVE. moto keeps the setting and never deletes. POST
# /_local/dynamodb-ttl?now=<unix seconds>&table=<name> does what TTL would have done by
# then: every item of a table whose TTL is enabled and whose attribute is
# a number before `now` is deleted through moto's own delete (the stream
# gets its REMOVE; moto keeps no index apart, so the item leaves them too).
# The answer is how many it deleted. A test with a virtual clock calls it
# with that clock's time; nothing is deleted on its own, as nothing on AWS
# is deleted at the instant its TTL passes.
def _expire(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    query = environ.get("QUERY_STRING", "")
    try:
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        now, named = float(params["now"]), params["table"]
    except (KeyError, ValueError):
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"POST /_local/dynamodb-ttl?now=<unix seconds>&table=<name>"]
    deleted = 0
    for account in dynamodb_models.dynamodb_backends.values():
        for backend in account.values():
            for table in backend.tables.values():
                if table.name != named or table.ttl.get("TimeToLiveStatus") != "ENABLED":
                    continue
                name = table.ttl.get("AttributeName")
                expired = []
                for bucket in list(table.items.values()):
                    for item in bucket.values() if table.range_key_attr else [bucket]:
                        value = item.attrs.get(name)
                        if value is None or value.type != "N":
                            continue
                        try:
                            if float(value.value) < now:
                                expired.append((item.hash_key, item.range_key))
                        except ValueError:
                            continue
                for hash_key, range_key in expired:
                    table.delete_item(hash_key, range_key)
                    deleted += 1
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"deleted": deleted}).encode()]


class Serial:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        with _lock:
            if environ.get("PATH_INFO") == "/_local/sqs-clock":
                return _clock(environ, start_response)
            if environ.get("PATH_INFO") == "/_local/dynamodb-conflict":
                return _arm_conflicts(environ, start_response)
            if environ.get("PATH_INFO") == "/_local/dynamodb-ttl":
                return _expire(environ, start_response)
            refused = local_iam.denied(environ)
            if refused is not None:
                return local_iam.refuse(environ, start_response, *refused)
            conflict = _conflict(environ, start_response)
            if conflict is not None:
                return conflict
            _carry_trace_header(environ)
            # Produce the whole body inside the lock: a lazy body would run
            # the backend after the lock is released.
            return _transaction(environ, start_response, self.app)


def run_simple(host, port, app, **kwargs):
    return _run_simple(host, port, Serial(app), **kwargs)


server.run_simple = run_simple

if __name__ == "__main__":
    server.main()
