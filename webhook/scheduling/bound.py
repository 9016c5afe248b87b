"""The bound pods that hold cards, as HAMi's metrics and the `cards` command show them: what
each container of a bound pod holds on each card, read from its allocation annotation.

The scheduler cache keeps a `BoundPods` in step with its watch; a scrape reads a snapshot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.hami import EncodingError, decode_kept
from .shares import share_of

UNREADABLE = -1  # container index of a holding read from a garbled annotation


@dataclass(frozen=True, slots=True)
class Holding:
    """What one container of a bound pod holds on one card."""

    container: int  # index in HAMi's order (init containers first); UNREADABLE if garbled
    card: str  # card id; "" when a garbled annotation names no card: every card of the node
    memory_mib: int
    cores: int
    whole: bool = False  # garbled: the card counts as fully used, as the allocator counts it


@dataclass(frozen=True, slots=True)
class BoundPod:
    uid: str
    namespace: str
    name: str
    node: str
    holdings: tuple[Holding, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def bound_pod(pod: JsonObject) -> BoundPod | None:
    """The cards a bound pod holds; None for a pod that is not bound or holds none."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = spec.get("nodeName")
    text = (meta.get("annotations") or {}).get(keys.ALLOCATED)
    if not node or text is None:
        return None
    try:
        if not isinstance(text, str):
            raise EncodingError("not a string")
        containers = decode_kept(text)
        if any(not d.card for devices in containers for d in devices):
            raise EncodingError("an entry has no card id")
        holdings = tuple(Holding(i, d.card, d.memory_mib, d.cores)
                         for i, devices in enumerate(containers) for d in devices)
    except EncodingError:
        share = share_of(pod)  # the allocator's reading of a garbled annotation
        holdings = tuple(Holding(UNREADABLE, c.card, 0, 0, whole=True) for c in share.cards) \
            or (Holding(UNREADABLE, "", 0, 0, whole=True),)
    if not holdings:
        return None
    return BoundPod(meta.get("uid", ""), meta.get("namespace", ""), meta.get("name", ""), node,
                    holdings)


class BoundPods:
    """The bound pods holding cards, by uid: fed where the watch events are applied, read on a
    scrape's thread.

    A pod that ends or is deleted is dropped here, so no series of it outlives it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, BoundPod] = {}

    def seen(self, pod: JsonObject) -> None:
        self.put((pod.get("metadata") or {}).get("uid", ""), bound_pod(pod))

    def put(self, uid: str, held: BoundPod | None) -> None:
        """The pod `uid` now holds `held` (its `bound_pod`; None: nothing)."""
        with self._lock:
            if held is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = held

    def get(self, uid: str) -> BoundPod | None:
        with self._lock:
            return self._pods.get(uid)

    def gone(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def clear(self) -> None:
        with self._lock:
            self._pods.clear()

    def snapshot(self) -> list[BoundPod]:
        with self._lock:
            return list(self._pods.values())
