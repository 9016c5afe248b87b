"""The extender's HTTP endpoints: POST /filter, /prioritize, /preempt, /bind; GET /healthz,
/readyz, /metrics. http_server.py serves them; main.py runs it.

Decode, call the verb (verbs.py), encode: nothing else happens here. Everything runs on the
event loop's one thread, each call in one go under the cache's lock, except what waits: a
bind's write and reads are awaited on the loop (kube/api.py), and what may take long
(/preempt, /metrics, a call that comes before the cache has listed and waits for it) runs on
a few threads, so that the loop keeps answering kube-scheduler's filters meanwhile. A call
that waits for nothing (a filter of a pod the watch shows, the common case) is answered
without a coroutine; a verb whose pod must be read first answers an awaitable (verbs.py).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..base import fast_json
from . import wire
from .http_server import MAX_BODY, Answer
from .verbs import Extender

log = logging.getLogger("webhook.extender")

# A call that comes while the extender is still listing (just started) waits this long for it:
# an error would park the pod in kube-scheduler's unschedulable queue for up to a minute.
READY_WAIT = 5.0  # seconds, below the configured httpTimeout (10 s)
THREADS = 4  # for /preempt, /metrics and the calls waiting for the first list

JSON = (("content-type", "application/json"),)  # tuples: the server keeps each head made
TEXT = (("content-type", "text/plain"),)
PAGES = ("/healthz", "/readyz", "/metrics")
VERBS = {"/filter": "filter", "/prioritize": "prioritize", "/preempt": "preempt", "/bind": "bind"}
ON_THREADS = {"preempt"}  # it reads every share of the nodes proposed: it may take a while
AWAITED = {"bind"} | ON_THREADS  # answered by a coroutine; the others at once


class ExtenderApp:
    """`respond` answers one request. `metrics`: a function answering GET /metrics as (body,
    status, headers), from metrics.hami_metrics.metrics_page."""

    def __init__(self, ext: Extender, metrics: Callable[[], tuple], ready_wait: float = READY_WAIT):
        self.ext, self.metrics, self.ready_wait = ext, metrics, ready_wait
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="extender")

    def respond(self, method: str, path: str, body: bytes | None):
        """(status, headers, body), or an awaitable of it when the answer has to wait.
        `body` None: it was over MAX_BODY bytes."""
        if path in VERBS and method == "POST":
            if body is None:
                return 413, JSON, _json({"Error": f"bad request: the body is over {MAX_BODY} bytes"})
            name = VERBS[path]
            if name in AWAITED or not self.ext.synced():
                return self._verb_later(name, body)
            return self._verb(name, body)
        if path in PAGES and method in ("GET", "HEAD"):
            if path == "/healthz":
                return 200, TEXT, b"ok\n"
            if path == "/readyz":
                return (200, TEXT, b"ok\n") if self.ext.source.ready() else (503, TEXT, b"not synced\n")
            return self._metrics()
        if path in VERBS or path in PAGES:
            return 405, TEXT, f"{method} {path}: method not allowed\n".encode()
        return 404, TEXT, f"{path}: not found\n".encode()

    def respond_pages(self, method: str, path: str, body: bytes | None):
        """`respond` for the metrics listener (--metrics-bind): the pages only; the verbs are
        answered on the loopback listener alone."""
        if path in VERBS:
            return 404, TEXT, f"{path}: not served on this port\n".encode()
        return self.respond(method, path, body)

    def _verb(self, name: str, body: bytes):
        try:
            result = getattr(self.ext, name)(_message(body))
        except wire.WireError as e:
            return _bad_request(e)
        if inspect.isawaitable(result):  # its pod is read first
            return self._answer_later(result)
        return 200, JSON, _json(result)

    @staticmethod
    async def _answer_later(result) -> Answer:
        return 200, JSON, _json(await result)

    async def _verb_later(self, name: str, body: bytes) -> Answer:
        loop = asyncio.get_running_loop()
        if not self.ext.synced():
            await loop.run_in_executor(self.pool, self.ext.source.wait_ready, self.ready_wait)
        if name not in AWAITED:
            answer = self._verb(name, body)
            return await answer if inspect.isawaitable(answer) else answer
        verb = getattr(self.ext, name)
        try:
            if name == "bind":
                result = await verb(_message(body))
            else:
                result = await loop.run_in_executor(self.pool, verb, _message(body))
        except wire.WireError as e:
            return _bad_request(e)
        if inspect.isawaitable(result):  # its pod is read first
            result = await result
        return 200, JSON, _json(result)

    async def _metrics(self) -> Answer:
        body, status, headers = await asyncio.get_running_loop().run_in_executor(self.pool, self.metrics)
        return status, tuple((k.lower(), v) for k, v in headers.items()), body

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _message(body: bytes):
    try:
        return fast_json.loads(body)
    except ValueError:  # not JSON, or not UTF-8: the verb says the body is not an object
        return None


def _bad_request(e: wire.WireError) -> Answer:
    return 400, JSON, _json({"Error": f"bad request: {e}"})


def _json(value) -> bytes:
    return fast_json.dumps(value)
