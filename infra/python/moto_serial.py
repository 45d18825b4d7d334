"""moto's server, answering one request at a time.

moto applies a DynamoDB conditional write as a read and a write that another
request thread can interleave with; DynamoDB applies each conditional write
(and each transaction) atomically. The runner's claim relies on that, so the
local stack serialises requests: threads and keep-alive stay, the backends see
one request at a time. Same arguments as moto_server (-H HOST -p PORT).
"""

import threading

import moto.server as server

_lock = threading.Lock()
_run_simple = server.run_simple


class Serial:
    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        with _lock:
            # Produce the whole body inside the lock: a lazy body would run
            # the backend after the lock is released.
            return list(self.app(environ, start_response))


def run_simple(host, port, app, **kwargs):
    return _run_simple(host, port, Serial(app), **kwargs)


server.run_simple = run_simple

if __name__ == "__main__":
    server.main()
