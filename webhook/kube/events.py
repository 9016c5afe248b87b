"""Events: FailedScheduling without spam (one Event per pod and message, its count kept up to
date at most every REFRESH_SECONDS while the pod keeps failing the same way), other warnings
at most once a while per object (`Throttle`), and the one shape of every Event the programs
write (`event_body`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timezone

REFRESH_SECONDS = 10.0


@dataclass
class Tracked:
    message: str
    name: str | None  # the Event object's name once created
    count: int
    written_count: int
    written_at: float


class EventBook:
    def __init__(self, refresh: float = REFRESH_SECONDS):
        self.refresh = refresh
        self.by_pod: dict[str, Tracked] = {}

    def note(self, uid: str, message: str, now: float) -> str | None:
        """Record one more failure; returns "create", "patch" or None (nothing to write)."""
        t = self.by_pod.get(uid)
        if t is None or t.message != message:
            self.by_pod[uid] = Tracked(message, None, 1, 0, now)
            return "create"
        t.count += 1
        if t.name is not None and now - t.written_at >= self.refresh:
            return "patch"
        return None

    def written(self, uid: str, name: str | None, now: float) -> None:
        t = self.by_pod.get(uid)
        if t is not None:
            if name is not None:
                t.name = name
            t.written_count, t.written_at = t.count, now

    def forget(self, uid: str) -> None:
        self.by_pod.pop(uid, None)


class Throttle:
    """At most one event per key every `every` seconds (one object that fails again and
    again is told of once in that time); at most `size` keys kept, the oldest dropped first."""

    def __init__(self, every: float, size: int = 4096):
        self.every, self.size = every, size
        self._last: OrderedDict[object, float] = OrderedDict()

    def due(self, key: object, now: float) -> bool:
        """Whether an event for `key` may be sent now (if so, it counts as sent)."""
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.size:
            self._last.popitem(last=False)
        return True


def now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(involved: dict, reason: str, message: str, component: str, instance: str) -> dict:
    """A core/v1 Warning Event about `involved` (apiVersion, kind, name, uid, and namespace for
    a namespaced object: the Event goes there, a node's to `default` as the kubelet's do)."""
    ns, now = involved.get("namespace") or "default", now_text()
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": ns},
        "involvedObject": involved, "reason": reason, "message": message, "type": "Warning",
        "source": {"component": component},
        "reportingComponent": component, "reportingInstance": instance,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }
