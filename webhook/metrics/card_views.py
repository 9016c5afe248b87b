"""The cards of a cluster and what each bound pod holds on them, as plain data.

Both HAMi's metrics (hami_metrics.py) and the `cards` command read this view. It is made from
the nodes' cards (scheduling/inventory.py reads them from status.capacity) and the bound pods'
allocation annotations (decoded by webhook/model/hami.py), the same data the allocator's cluster
state is built from, so the figures agree with what the allocator decides on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..model.cards import CORES_PER_CARD
from ..scheduling.bound import BoundPod, Holding
from ..scheduling.inventory import Card, NodeCards


@dataclass(frozen=True)
class CardView:
    node: str
    card: Card
    memory_used_mib: int
    cores_used: int
    containers: int  # container entries on the card (HAMi's shared count)
    pods: tuple[str, ...]  # "namespace/name" of the pods on it, sorted
    max_instances: int  # containers the card may hold at most (its node's limit)
    cordoned: bool  # named in its node's hami.io/device-cordon: takes nothing new


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
                                  tuple(sorted({p.key for p, _ in held})),
                                  cards.settings.max_instances,
                                  card.id in cards.settings.cordoned))
    return views
