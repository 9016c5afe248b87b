"""The pods/binding writes and the pod re-reads, a few at a time, off the decision thread.

A binding's round trip is most of what placing a pod costs, and the API server takes
several at once; so the decision thread assumes the share, hands the write to this pool
and goes on deciding. Each outcome (and each re-read of a pod whose binding outcome is
unknown) comes back through the loop's event queue, so only the decision thread ever
touches the state.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from ..scheduling.decide import Placement
from .api import Api, ApiError

DEFAULT_THREADS = 32
EVENT_KIND = "bind"  # the kind of the queue items a binding's outcome is posted as
READ_KIND = "read"  # ... and a re-read's


def _binding_path(body: dict) -> str:
    meta = body["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def post_binding(api: Api, body: dict) -> tuple[int | None, str]:
    """Write one pods/binding: (HTTP status, message); status None: the API server was not
    reached, the write may have happened."""
    try:
        reply = api.call("POST", _binding_path(body), body=body)
    except ApiError as e:
        return None, str(e)
    return reply.status, reply.message()


def read_pod(api: Api, namespace: str, name: str) -> tuple[int, dict | None]:
    """A fresh GET: (HTTP status, the pod or None); (0, None) if the API server was not reached."""
    try:
        reply = api.call("GET", _pod_path(namespace, name))
    except ApiError:
        return 0, None
    return reply.status, reply.body if reply.ok else None


async def post_binding_async(api, body: dict) -> tuple[int | None, str]:
    """`post_binding` on an event loop (`api`: an AsyncApi)."""
    try:
        reply = await api.call("POST", _binding_path(body), body=body)
    except ApiError as e:
        return None, str(e)
    return reply.status, reply.message()


async def patch_pod_async(api, namespace: str, name: str, patch: dict) -> tuple[int | None, str]:
    """A JSON merge patch of a pod on an event loop (`api`: an AsyncApi): (HTTP status,
    message); status None: the API server was not reached."""
    try:
        reply = await api.call("PATCH", _pod_path(namespace, name), body=patch,
                               content_type="application/merge-patch+json")
    except ApiError as e:
        return None, str(e)
    return reply.status, reply.message()


async def read_pod_async(api, namespace: str, name: str) -> tuple[int, dict | None]:
    """`read_pod` on an event loop (`api`: an AsyncApi)."""
    try:
        reply = await api.call("GET", _pod_path(namespace, name))
    except ApiError:
        return 0, None
    return reply.status, reply.body if reply.ok else None


@dataclass(frozen=True)
class BindOutcome:
    pod: dict  # as it was decided, to put back in the queue if the write is refused
    placement: Placement
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
                 threads: int = DEFAULT_THREADS):
        self.api, self.events, self.holds_lease = api, events, holds_lease
        self.threads = threads
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="bind")
        self.in_flight = 0  # the decision thread's count: submitted, outcome not yet applied

    @property
    def full(self) -> bool:
        # a little queued work keeps every thread busy; more would only age the decisions
        return self.in_flight >= 2 * self.threads

    def submit(self, session: int, pod: dict, placement: Placement, body: dict) -> None:
        self.in_flight += 1
        self.pool.submit(self._write, session, pod, placement, body)

    def applied(self) -> None:
        self.in_flight -= 1

    def reread(self, session: int, uid: str, namespace: str, name: str) -> None:
        self.pool.submit(self._read, session, uid, namespace, name)

    def _write(self, session: int, pod: dict, placement: Placement, body: dict) -> None:
        t0 = time.perf_counter()
        if not self.holds_lease():  # the lease must still be ours at the moment we write
            status, message = 0, "not written: the lease was lost"
        else:
            status, message = post_binding(self.api, body)
        outcome = BindOutcome(pod, placement, body, status, message, time.perf_counter() - t0)
        self.events.put((session, EVENT_KIND, "DONE", outcome))

    def _read(self, session: int, uid: str, namespace: str, name: str) -> None:
        status, pod = read_pod(self.api, namespace, name)
        self.events.put((session, READ_KIND, "DONE", ReadOutcome(uid, status, pod)))

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
