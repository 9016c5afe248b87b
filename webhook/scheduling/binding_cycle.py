"""The binding cycle of both front-ends, once: a share assumed, its binding written, and the
write's outcome applied to the scheduler cache (cache.py), after kube-scheduler's
assume → bind → finish binding or forget.

    assume ──> the write (the front-end's) ──> outcome(status):
        2xx                       BOUND     finish_binding: counted until the watch shows it
        no answer (None)          UNKNOWN   binding_unknown: held; re-read every REREAD_EVERY
        404 / 409                 READ_NOW  held; re-read at once (gone, or bound by another)
        any other refusal         DROPPED   forget: nothing was written, the pod waits again
        (the watch replaced it)   STALE     nothing left to do

    a re-read's answer (`read`) ──> bound (the pod's real share) | unbound (dropped) | gone

The cycle does no I/O: a re-read (a GET of the pod) is the front-end's `read(uid, namespace,
name)`, passed to the calls that may start one; it returns whatever the front-end wants back
(the allocator: nothing, the answer comes through its event queue; the extender: an awaitable)
and the answer comes back to `read_answer`. One thread (or one event loop) calls a cycle.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Callable, TypeVar

from ..base.json_types import JsonObject
from .cache import READ, Phase, SchedulerCache
from .shares import PodShare

R = TypeVar("R")
Read = Callable[[str, str, str], R]  # (uid, namespace, name): start a GET of the pod

REREAD_EVERY = 1.0  # seconds between re-reads of one pod whose binding outcome is unknown


class Outcome(Enum):
    BOUND = "bound"  # written: counted until the watch shows the pod bound
    UNKNOWN = "unknown"  # it may have happened: held, re-read every REREAD_EVERY seconds
    READ_NOW = "read now"  # 404/409: gone or bound by someone else; held, a read is started
    DROPPED = "dropped"  # refused, nothing written: the share is dropped, the pod waits again
    STALE = "stale"  # the watch has replaced the share since: nothing is left to do


class BindingCycle:
    def __init__(self, cache: SchedulerCache, clock: Callable[[], float] = time.monotonic):
        self.cache, self.clock = cache, clock
        self.reading: set[str] = set()  # uids whose re-read is under way
        self._last_read: dict[str, float] = {}  # uid -> clock() of its last re-read

    def assume(self, share: PodShare, namespace: str, name: str) -> None:
        """Count the share now, before its binding is written."""
        self.cache.assume(share, namespace, name)

    def not_written(self, share: PodShare) -> bool:
        """Nothing was sent (the body or the hand-off raised): the cards are free again."""
        return self.cache.forget(share)

    def outcome(self, share: PodShare, namespace: str, name: str, status: int | None,
                read: Read[R]) -> tuple[Outcome, R | None]:
        """A write's outcome (its HTTP status; None: the API server was not reached) applied
        to the cache; with what `read` returned when a re-read was started (404/409)."""
        if status is None:
            self.cache.binding_unknown(share)
            return Outcome.UNKNOWN, None
        if 200 <= status < 300:
            self.cache.finish_binding(share)
            return Outcome.BOUND, None
        left = self.cache.binding_refused(share, status)
        if left == READ:
            return Outcome.READ_NOW, self.read_now(share.uid, namespace, name, read)
        return (Outcome.DROPPED, None) if left is not None else (Outcome.STALE, None)

    def read_now(self, uid: str, namespace: str, name: str, read: Read[R]) -> R:
        self.reading.add(uid)
        self._last_read[uid] = self.clock()
        return read(uid, namespace, name)

    def reread_due(self, read: Read[R]) -> list[R]:
        """Start a re-read of each pod whose outcome is unknown, read last REREAD_EVERY
        seconds ago or more and not under way; returns what each `read` returned."""
        now, uncertain = self.clock(), self.cache.uncertain()
        # the pods settled since (seen bound or gone by the watch) are no longer timed
        self._last_read = {uid: self._last_read[uid] for uid, _, _ in uncertain
                           if uid in self._last_read}
        return [self.read_now(uid, namespace, name, read) for uid, namespace, name in uncertain
                if uid not in self.reading
                and now - self._last_read.get(uid, float("-inf")) >= REREAD_EVERY]

    def read_answer(self, uid: str, status: int, pod: JsonObject | None) -> str | None:
        """A re-read's answer (HTTP status, the pod or None; 0: not reached): "bound",
        "unbound" (the share dropped: the pod waits again), "gone", "unknown" (still held);
        None when the pod's binding is no longer in doubt (settled, or written again since:
        an answer older than that write must not undo it)."""
        self.reading.discard(uid)
        if self.cache.phase(uid) is not Phase.UNCERTAIN:
            return None
        return self.cache.resolved(uid, status, pod)

    def learn(self, uid: str, status: int, pod: JsonObject | None) -> str:
        """A read the front-end made of a pod in doubt before binding it again: what the
        cache learns from it (as `read_answer`, whatever the pod's phase)."""
        return self.cache.resolved(uid, status, pod)
