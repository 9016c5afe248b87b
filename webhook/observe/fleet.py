"""The cards of a cluster and what each bound pod holds on them, as plain data.

Both HAMi's metrics (hami_metrics.py) and the `cards` command read this view. It is made from
the nodes' cards (allocator/inventory.py reads them from status.capacity) and the bound pods'
allocation annotations (decoded by webhook/hami.py), the same data the allocator's cluster
state is built from, so the figures agree with what the allocator decides on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from .. import annotations as keys
from ..scheduling.inventory import Card, NodeCards
from ..scheduling.shares import share_of
from ..cards import CORES_PER_CARD
from ..hami import EncodingError, decode

UNREADABLE = -1  # container index of a holding read from a garbled annotation


@dataclass(frozen=True)
class Holding:
    """What one container of a bound pod holds on one card."""

    container: int  # index in HAMi's order (init containers first); UNREADABLE if garbled
    card: str  # card id; "" when a garbled annotation names no card: every card of the node
    memory_mib: int
    cores: int
    whole: bool = False  # garbled: the card counts as fully used, as the allocator counts it


@dataclass(frozen=True)
class BoundPod:
    uid: str
    namespace: str
    name: str
    node: str
    holdings: tuple[Holding, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class CardView:
    node: str
    card: Card
    memory_used_mib: int
    cores_used: int
    containers: int  # container entries on the card (HAMi's shared count)
    pods: tuple[str, ...]  # "namespace/name" of the pods on it, sorted


def bound_pod(pod: dict) -> BoundPod | None:
    """The cards a bound pod holds; None for a pod that is not bound or holds none."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    node = spec.get("nodeName")
    text = (meta.get("annotations") or {}).get(keys.ALLOCATED)
    if not node or text is None:
        return None
    try:
        if not isinstance(text, str):
            raise EncodingError("not a string")
        containers = decode(text)
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


def copy_of(view: Callable[[], Iterable]) -> list:
    """list(view()) for a scrape: the decision thread may change the dict under the view while
    it is read, so retry when it moved (empty after ten tries)."""
    for _ in range(10):
        try:
            return list(view())
        except RuntimeError:
            continue
    return []


def card_views(nodes: Iterable[tuple[str, NodeCards]], pods: Iterable[BoundPod]) -> list[CardView]:
    """One view per card of the nodes given, in node then index order."""
    on_card: dict[str, list[tuple[BoundPod, Holding]]] = {}
    on_node: dict[str, list[tuple[BoundPod, Holding]]] = {}  # garbled, no card named
    for p in pods:
        for h in p.holdings:
            if h.card:
                on_card.setdefault(h.card, []).append((p, h))
            else:
                on_node.setdefault(p.node, []).append((p, h))
    views = []
    for node, cards in sorted(nodes, key=lambda nc: nc[0]):
        for card in cards.cards:
            held = on_card.get(card.id, []) + on_node.get(node, [])
            memory = cores = 0
            for _, h in held:
                memory += card.memory_mib if h.whole else h.memory_mib
                cores += CORES_PER_CARD if h.whole else h.cores
            views.append(CardView(node, card, memory, cores, len(held),
                                  tuple(sorted({p.key for p, _ in held}))))
    return views


class BoundPods:
    """The bound pods holding cards, by uid: fed where the watch events are applied, read on a
    scrape's thread.

    A pod that ends or is deleted is dropped here, so no series of it outlives it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pods: dict[str, BoundPod] = {}

    def seen(self, pod: dict) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        held = bound_pod(pod)
        with self._lock:
            if held is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = held

    def gone(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def clear(self) -> None:
        with self._lock:
            self._pods.clear()

    def snapshot(self) -> list[BoundPod]:
        with self._lock:
            return list(self._pods.values())
