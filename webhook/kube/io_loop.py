"""The I/O loop: an event loop on a thread of its own, where a threaded program's Kubernetes
calls and watches run (the API client, kube/api.py, is asynchronous).

The allocator decides on one thread and does all its Kubernetes I/O here: the watches, the
bindings and re-reads (binder.py), the Lease (leader.py), the reports (reporter.py); what they
learn comes back to the decision thread through its queue. Blocking code (the `cards`
command, the start-up probe, a test) calls through `run_blocking`. One loop per process,
started the first time it is asked for (`io_loop()`); the extender, whose verbs and watches
run on the loop that answers kube-scheduler, does not use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Coroutine, TypeVar

import uvloop

T = TypeVar("T")


class IoLoop:
    def __init__(self, name: str = "kube-io"):
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        """Run `coro` on the loop; its outcome in the future (whose cancel() cancels it)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[object, object, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its outcome (not from the loop's own thread)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("run() on the I/O loop's own thread would wait for ever")
        return self.submit(coro).result(timeout)

    def call_soon(self, callback, *args) -> None:
        """`callback(*args)` on the loop, from any thread."""
        self.loop.call_soon_threadsafe(callback, *args)


_shared: IoLoop | None = None
_shared_lock = threading.Lock()


def io_loop() -> IoLoop:
    """The process's I/O loop, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = IoLoop()
        return _shared


def run_blocking(coro: Coroutine[object, object, T], timeout: float | None = None) -> T:
    """Run a coroutine to completion from blocking code, on the process's I/O loop."""
    return io_loop().run(coro, timeout)
