"""The allocator's pods/binding writes and pod re-reads, a few at a time, on the I/O loop.

A binding's round trip is most of what placing a pod costs, and the API server takes
several at once; so the decision thread assumes the share, hands the write to the binder
and goes on deciding. Each outcome (and each re-read of a pod whose binding outcome is
unknown) comes back through the decision loop's queue, so only the decision thread ever
touches its state. At most `writes` requests are under way at once (a semaphore on the I/O
loop, kube/io_loop.py).

The binder knows a body and what it answered; whatever the caller wants back beside the
outcome (the allocator: the pod and its placement) it passes as `context`, handed back as is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import time
from dataclasses import dataclass
from typing import Any, Callable

from .api import Api
from .io_loop import IoLoop, io_loop
from .pods import post_binding, read_pod

DEFAULT_WRITES = 32
EVENT_KIND = "bind"  # the kind of the queue items a binding's outcome is posted as
READ_KIND = "read"  # ... and a re-read's


@dataclass(frozen=True)
class BindOutcome:
    context: Any  # the caller's, handed back as is
    body: dict
    status: int | None  # None: the API server was not reached, the write may have happened
    message: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class ReadOutcome:
    uid: str
    status: int  # 0: not reached
    pod: dict | None


class Binder:
    def __init__(self, api: Api, events: queue.Queue, holds_lease: Callable[[], bool],
                 writes: int = DEFAULT_WRITES, io: IoLoop | None = None):
        """`events`: the queue the outcomes are put in, as (session, EVENT_KIND or READ_KIND,
        "DONE", outcome); `holds_lease()` is asked right before each write is sent."""
        self.api, self.events, self.holds_lease = api, events, holds_lease
        self.writes = writes
        self.io = io or io_loop()
        self._slots: asyncio.Semaphore | None = None  # made on the I/O loop
        self._under_way: set[concurrent.futures.Future] = set()
        self._stopping = False
        self.in_flight = 0  # the decision thread's count: submitted, outcome not yet applied

    @property
    def full(self) -> bool:
        # a little queued work keeps every write slot busy; more would only age the decisions
        return self.in_flight >= 2 * self.writes

    def submit(self, session: int, body: dict, context: Any = None) -> None:
        """Write `body` (a pods/binding); its BindOutcome, with `context`, comes to the queue."""
        self.in_flight += 1
        self._start(self._write(session, body, context))

    def applied(self) -> None:
        self.in_flight -= 1

    def reread(self, session: int, uid: str, namespace: str, name: str) -> None:
        self._start(self._read(session, uid, namespace, name))

    def _start(self, coro) -> None:
        future = self.io.submit(coro)
        self._under_way.add(future)
        future.add_done_callback(self._under_way.discard)

    async def _slot(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.writes)
        return self._slots

    async def _write(self, session: int, body: dict, context: Any) -> None:
        async with await self._slot():
            if self._stopping:  # not begun before the shutdown: dropped, as a queued job
                return
            t0 = time.perf_counter()
            if not self.holds_lease():  # the lease must still be ours at the moment we write
                status, message = 0, "not written: the lease was lost"
            else:
                status, message = await post_binding(self.api, body)
            outcome = BindOutcome(context, body, status, message, time.perf_counter() - t0)
        self.events.put((session, EVENT_KIND, "DONE", outcome))

    async def _read(self, session: int, uid: str, namespace: str, name: str) -> None:
        async with await self._slot():
            if self._stopping:
                return
            status, pod = await read_pod(self.api, namespace, name)
        self.events.put((session, READ_KIND, "DONE", ReadOutcome(uid, status, pod)))

    def shutdown(self) -> None:
        """Drop what has not begun; wait for the writes and reads under way."""
        self._stopping = True
        concurrent.futures.wait(list(self._under_way))
