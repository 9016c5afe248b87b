"""FailedScheduling events without spam: one Event per pod and message, its count kept up to
date at most every REFRESH_SECONDS while the pod keeps failing the same way."""

from __future__ import annotations

from dataclasses import dataclass

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
