"""One instance of each immutable value the cache holds many times over: a cluster of 5,000
nodes × 110 pods holds 550,000 pods' requests, terms and facts, and the replicas of a
Deployment hold equal ones (bench part `memory` measures it)."""

from __future__ import annotations

import sys
from typing import Hashable, TypeVar

T = TypeVar("T", bound=Hashable)

_KEPT: dict[object, object] = {}
_KEPT_AT_MOST = 200_000  # distinct values; past it the table starts over (copies are still equal)


def one_copy(value: T) -> T:
    kept = _KEPT.get(value)
    if kept is None:
        if len(_KEPT) >= _KEPT_AT_MOST:
            _KEPT.clear()
        _KEPT[value] = kept = value
    return kept  # type: ignore[return-value]


def one_name(name: str) -> str:
    """A node's or namespace's name, held once however many pods name it."""
    return sys.intern(name) if isinstance(name, str) else name
