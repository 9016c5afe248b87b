"""The extender's HTTP endpoints as a plain ASGI app: POST /filter, /prioritize, /preempt,
/bind; GET /healthz, /readyz, /metrics. main.py serves it with uvicorn.

Decode, call the verb (verbs.py), encode: nothing else happens here. Everything runs on the
event loop's one thread, each call in one go under the cache's lock, except what waits: a
bind's write and reads are awaited on the loop (kube/async_api.py), and what may take long
(/preempt, /metrics, a call that comes before the cache has listed and waits for it) runs on
a few threads, so that the loop keeps answering kube-scheduler's filters meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from . import wire
from .verbs import Extender

log = logging.getLogger("webhook.extender")

MAX_BODY = 8 * 1024 * 1024  # a pod and 5,000 node names take under 1 MiB
# A call that comes while the extender is still listing (just started) waits this long for it:
# an error would park the pod in kube-scheduler's unschedulable queue for up to a minute.
READY_WAIT = 5.0  # seconds, below the configured httpTimeout (10 s)
THREADS = 4  # for /preempt, /metrics and the calls waiting for the first list

JSON = [(b"content-type", b"application/json")]
TEXT = [(b"content-type", b"text/plain")]
PAGES = ("/healthz", "/readyz", "/metrics")
VERBS = {"/filter": "filter", "/prioritize": "prioritize", "/preempt": "preempt", "/bind": "bind"}
ON_THREADS = {"preempt"}  # it reads every share of the nodes proposed: it may take a while


class BodyTooLarge(Exception):
    pass


class ExtenderApp:
    """The ASGI callable. `metrics`: a function answering GET /metrics as (body, status,
    headers), from observe.hami_metrics.metrics_page."""

    def __init__(self, ext: Extender, metrics: Callable[[], tuple], ready_wait: float = READY_WAIT):
        self.ext, self.metrics, self.ready_wait = ext, metrics, ready_wait
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="extender")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        try:
            if path in VERBS and method == "POST":
                status, body, headers = await self._verb(VERBS[path], receive)
            elif path in PAGES and method in ("GET", "HEAD"):
                status, body, headers = await self._page(path)
            elif path in VERBS or path in PAGES:
                status, body, headers = 405, f"{method} {path}: method not allowed\n".encode(), TEXT
            else:
                status, body, headers = 404, f"{path}: not found\n".encode(), TEXT
        except BodyTooLarge:
            status, headers = 413, JSON
            body = _json({"Error": f"bad request: the body is over {MAX_BODY} bytes"})
        except Exception as e:  # a bug: the caller is told, the server goes on
            log.exception("%s %s", method, path)
            status, body, headers = 500, _json({"Error": f"internal error: {type(e).__name__}"}), JSON
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    async def _verb(self, name: str, receive):
        raw = await _read_body(receive)
        try:
            message = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8: the verb says the body is not an object
            message = None
        loop = asyncio.get_running_loop()
        if not self.ext.synced():
            await loop.run_in_executor(self.pool, self.ext.source.wait_ready, self.ready_wait)
        verb = getattr(self.ext, name)
        try:
            if name == "bind":
                result = await verb(message)
            elif name in ON_THREADS:
                result = await loop.run_in_executor(self.pool, verb, message)
            else:
                result = verb(message)
        except wire.WireError as e:
            return 400, _json({"Error": f"bad request: {e}"}), JSON
        return 200, _json(result), JSON

    async def _page(self, path: str):
        if path == "/healthz":
            return 200, b"ok\n", TEXT
        if path == "/readyz":
            return (200, b"ok\n", TEXT) if self.ext.source.ready() else (503, b"not synced\n", TEXT)
        body, status, headers = await asyncio.get_running_loop().run_in_executor(self.pool, self.metrics)
        return status, body, [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _read_body(receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
