"""One instance of each immutable value the cache holds many times over: a cluster of 5,000
nodes × 110 pods holds 550,000 pods' requests, terms and facts, and the replicas of a
Deployment hold equal ones (bench part `memory` measures it).

A value is kept while a pod the cache counts holds it, no longer: the state `hold`s the values
of each share it adds and `release`s them when the share goes (state.py), and a reading of a
pod (`one_copy`) finds the copy a counted pod holds, or keeps its own. So what pods gone or
never placed asked for (a 1.3 MiB anti-affinity term) leaves with them (issue 46, finding 6).
"""

from __future__ import annotations

import sys
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """A table of copies by key, each with the count of the holders that hold it."""

    def __init__(self) -> None:
        self._kept: dict[K, tuple[V, int]] = {}

    def get(self, key: K) -> V | None:
        kept = self._kept.get(key)
        return kept[0] if kept is not None else None

    def hold(self, key: K, value: V) -> None:
        kept = self._kept.get(key)
        self._kept[key] = (value, 1) if kept is None else (kept[0], kept[1] + 1)

    def release(self, key: K) -> None:
        kept = self._kept.get(key)
        if kept is None:
            return
        if kept[1] <= 1:
            del self._kept[key]
        else:
            self._kept[key] = (kept[0], kept[1] - 1)

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept


VALUES: Kept[object, object] = Kept()  # each value is its own key


def one_copy(value: K) -> K:
    """The copy a counted pod holds of a value equal to `value`, else `value` itself."""
    kept = VALUES.get(value)
    return value if kept is None else kept  # type: ignore[return-value]


def hold(value: object) -> None:
    VALUES.hold(value, value)


def release(value: object) -> None:
    VALUES.release(value)


def one_name(name: str) -> str:
    """A node's or namespace's name, held once however many pods name it."""
    return sys.intern(name) if isinstance(name, str) else name
