"""moto's server, answering one request at a time.

moto applies a DynamoDB conditional write as a read and a write that another
request thread can interleave with; DynamoDB applies each conditional write
(and each transaction) atomically. The runner's claim relies on that, so the
local stack serialises requests: threads and keep-alive stay, the backends see
one request at a time. Same arguments as moto_server (-H HOST -p PORT).

It also gives SQS a clock that tests can move (see `_clock`).
"""

import threading

import moto.server as server
import moto.sqs.models as sqs_models

_lock = threading.Lock()
_run_simple = server.run_simple

# SQS's clock, which tests move forward. moto hides a received message until
# its visibility timeout passes on the wall clock; a test cannot wait the
# runs queue's 2160 s, and one that made the message visible at once would
# hide the defect that matters (a returned message comes back only after its
# visibility). POST /_local/sqs-clock?advance=<seconds> moves this clock:
# visibility, delays and retention then follow it as they follow time on AWS.
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
    except ValueError:
        advance = -1.0
    if environ.get("REQUEST_METHOD") != "POST" or not 0.0 <= advance <= 1_209_600.0:
        start_response("400 Bad Request", [("Content-Type", "text/plain")])
        return [b"POST /_local/sqs-clock?advance=<0..1209600 seconds>"]
    _sqs_offset_seconds += advance
    start_response("200 OK", [("Content-Type", "application/json")])
    return [('{"offset_seconds": %s}' % _sqs_offset_seconds).encode()]


class Serial:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        with _lock:
            if environ.get("PATH_INFO") == "/_local/sqs-clock":
                return _clock(environ, start_response)
            # Produce the whole body inside the lock: a lazy body would run
            # the backend after the lock is released.
            return list(self.app(environ, start_response))


def run_simple(host, port, app, **kwargs):
    return _run_simple(host, port, Serial(app), **kwargs)


server.run_simple = run_simple

if __name__ == "__main__":
    server.main()
