"""What a front-end tells of an object that raised while it was decided or indexed (issue
46): one log line naming it, a Warning event on it (at most one per object and stage every
EVENT_EVERY seconds) and a count by front-end and stage, `mthreads_object_errors_total`.

The front-ends catch at their boundaries (the allocator's loop: one event, one decision; the
extender's verbs and watches) and go on with the other objects; the scheduling cache hands
back the objects it could not apply (scheduling/cache.py). `warn` sends the event, each
front-end its own way (the allocator's on its I/O loop, the extender's on its event loop).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from prometheus_client import CollectorRegistry, Counter

from ..kube.events import Throttle
from ..scheduling.object_errors import KINDS, ObjectError

log = logging.getLogger(__name__)

METRIC = "mthreads_object_errors_total"
EVENT_EVERY = 60.0  # seconds between two events of one object and stage
INDEX = "index"  # a watch's object applied to the cache
DECIDE = "decide"  # the allocator's decision of a pod
VERBS = ("filter", "prioritize", "preempt", "bind")  # the extender's, each of a pod
STAGES = {"allocator": (INDEX, DECIDE), "extender": (INDEX, *VERBS)}

Warn = Callable[[dict, str, str], None]  # (involvedObject, reason, message)


def event_reason(stage: str) -> str:
    return "IndexingError" if stage == INDEX else "SchedulingError"


def involved_object(err: ObjectError) -> dict | None:
    """The event's involvedObject; None when the object names none (no event)."""
    if not err.name or err.kind not in KINDS:
        return None
    api_version, kind = KINDS[err.kind]
    out = {"apiVersion": api_version, "kind": kind, "name": err.name, "uid": err.uid}
    if err.namespace:
        out["namespace"] = err.namespace
    return out


class ObjectErrors:
    """`frontend`: "allocator" or "extender", the counter's label; `registry`: where the
    counter is exposed (that front-end's /metrics)."""

    def __init__(self, frontend: str, registry: CollectorRegistry, warn: Warn,
                 clock: Callable[[], float] = time.monotonic):
        self.frontend, self.warn, self.clock = frontend, warn, clock
        self.count = Counter(METRIC, "Objects whose decision or indexing raised, by front-end "
                             "and stage (each told of and skipped)", ["frontend", "stage"],
                             registry=registry)
        for stage in STAGES[frontend]:
            self.count.labels(frontend, stage)  # each series from 0, for rates and alerts
        self._throttle = Throttle(EVENT_EVERY)
        self._lock = threading.Lock()  # the extender's preemptions report from its threads

    def report(self, stage: str, err: ObjectError) -> str:
        """Count, log and (unless told of lately) warn about `err`; returns the message that
        says what raised, for an answer."""
        self.count.labels(self.frontend, stage).inc()
        message = f"the {self.frontend}'s {stage} raised {err.what}"
        log.warning("%s: %s; skipped, the others go on", err.who, message)
        log.debug("%s: %s", err.who, stage, exc_info=err.error)
        involved = involved_object(err)
        if involved is None:
            return message
        with self._lock:
            due = self._throttle.due((err.kind, err.namespace, err.name, err.uid, stage),
                                     self.clock())
        if due:
            self.warn(involved, event_reason(stage), message)
        return message
