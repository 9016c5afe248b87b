"""Which cards of a node can serve the pod's request (SPEC 4).

The cards go through a fixed pipeline of filters; the first filter that leaves fewer
cards than the pod needs names the node's reason. All slices of a pod share one card;
N whole cards take N idle cards of the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..model.cards import CORES_PER_CARD, UNIT_MIB
from ..model.pods import Kind, PodRequest
from . import reasons
from .inventory import Card, NodeCards
from .state import CardUsage, NodeRoom, card_used, shareable


@dataclass(frozen=True)
class CardNeed:
    """A pod's request reduced to what a card check needs."""

    kind: Kind
    cards: int  # cards the pod holds: 1 for slices
    memory_mib: int  # per card: sum of the slices, or 0 for whole cards (they take all)
    cores: int  # per card: sum of the slices' cores
    any_coreless: bool  # some slice names no cores: needs a card whose cores are not all reserved
    containers: int  # containers that will hold a share of each card (instances it adds)
    model_units: frozenset[int]
    use: frozenset[str]  # card ids allowed (empty: all)
    nouse: frozenset[str]  # card ids avoided
    # (free MiB, free cores) a card must at least have (least_card), worked out once: a
    # decision's look at each node's room reads it
    least: tuple[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "least", least_card(self))  # frozen


def card_ids(text: object) -> frozenset[str]:
    if not isinstance(text, str):
        return frozenset()
    return frozenset(p.strip() for p in text.split(",") if p.strip())


def need_of(request: PodRequest, use: frozenset[str] = frozenset(),
            nouse: frozenset[str] = frozenset()) -> CardNeed:
    slices = request.slices
    return CardNeed(
        kind=request.kind, cards=request.cards,
        memory_mib=sum(a.slice_memory for a in slices) * UNIT_MIB,
        cores=sum(a.cores or 0 for a in slices),
        any_coreless=any(a.cores is None for a in slices),
        containers=len(slices) or 1,  # whole cards: one container on each card
        model_units=frozenset(m.units for m in request.models), use=use, nouse=nouse)


def held_whole(card: Card, u: CardUsage) -> bool:
    """A card held exclusively (or simply full) takes nothing more."""
    return not shareable(card.memory_mib, u)


Usage = Callable[[str], CardUsage]


# The card filters in their order: a node's reason is the first that leaves too few cards.
_ORDER = (reasons.TYPE_MISMATCH, reasons.UUID_MISMATCH, reasons.CORDONED,
          reasons.EXCLUSIVE_CONFLICT, reasons.TIME_SLICING_EXHAUSTED, reasons.CORES_EXHAUSTED,
          reasons.INSUFFICIENT_CARD_MEMORY, reasons.INSUFFICIENT_CARD_CORES)
_RANK = {r: i for i, r in enumerate(_ORDER)}


def _refusal(need: CardNeed, node: NodeCards, c: Card, u: CardUsage) -> str | None:
    """The first card filter that refuses card `c` (its usage `u`) on its own, or None. The one
    statement of the card rules: written as one pass, since a filter at a time over the cards
    cost the extender's filter, on kube-scheduler's path for every pod, twice as much."""
    if c.model.units not in need.model_units:
        return reasons.TYPE_MISMATCH
    if (need.use and c.id not in need.use) or c.id in need.nouse:
        return reasons.UUID_MISMATCH
    if c.id in node.settings.cordoned:
        return reasons.CORDONED
    if need.kind is Kind.WHOLE:
        return None if u.idle else reasons.EXCLUSIVE_CONFLICT
    if held_whole(c, u):
        return reasons.EXCLUSIVE_CONFLICT
    if u.containers + need.containers > node.settings.max_instances:
        return reasons.TIME_SLICING_EXHAUSTED
    if need.any_coreless and u.cores >= CORES_PER_CARD:
        return reasons.CORES_EXHAUSTED
    if c.memory_mib - u.memory_mib < need.memory_mib:
        return reasons.INSUFFICIENT_CARD_MEMORY
    if CORES_PER_CARD - u.cores < need.cores:
        return reasons.INSUFFICIENT_CARD_CORES
    return None


def card_reasons(need: CardNeed, node: NodeCards, usage: Usage) -> list[tuple[Card, str | None]]:
    """Each card of the node with the first filter that refuses it on its own, or None: the
    same filters as fit_cards, card by card (fit_cards names the one that leaves too few)."""
    return [(c, _refusal(need, node, c, usage(c.id))) for c in node.cards]


def fraction_used(card: Card, u: CardUsage) -> float:
    return card_used(card.memory_mib, u)


def fit_cards(need: CardNeed, node: NodeCards, usage: Usage, node_held_whole: bool,
              gpu_policy: str) -> tuple[str | None, tuple[Card, ...]]:
    """(None, chosen cards) or (reason, ()). The reason is the first filter after which fewer
    cards than the pod needs are left."""
    if node.problem:
        return reasons.INCONSISTENT, ()
    if len(node.cards) < need.cards:
        return reasons.NO_DEVICE, ()
    if node_held_whole:
        return reasons.EXCLUSIVE_CONFLICT, ()
    passing: list[tuple[Card, CardUsage]] = []
    ranks: list[int] = []  # of the filter that refused each other card
    for c in node.cards:
        u = usage(c.id)
        why = _refusal(need, node, c, u)
        if why is None:
            passing.append((c, u))
        else:
            ranks.append(_RANK[why])
    short = need.cards - len(passing)
    if short > 0:  # a card refused at rank r passes every filter before it
        return _ORDER[sorted(ranks, reverse=True)[short - 1]], ()
    if need.kind is Kind.WHOLE:
        return None, tuple(c for c, _ in passing[:need.cards])  # all idle: lowest indexes first
    sign = -1 if gpu_policy == "binpack" else 1  # spread: least used card first
    best, _ = min(passing, key=lambda cu: (sign * fraction_used(*cu), cu[0].index))
    return None, (best,)


def least_card(need: CardNeed) -> tuple[int, int]:
    """(free MiB, free cores) that a card must at least have to serve the need."""
    if need.kind is Kind.WHOLE:  # an idle card of the smallest model the pod may take
        return min(need.model_units, default=0) * UNIT_MIB, CORES_PER_CARD
    return need.memory_mib, max(need.cores, 1 if need.any_coreless else 0)


def may_fit(need: CardNeed, room: NodeRoom) -> bool:
    """False only when no card of the node can serve the need: a cheap first look."""
    if room.models.isdisjoint(need.model_units):
        return False
    if need.kind is Kind.WHOLE:
        return room.idle >= need.cards
    least_mib, least_cores = need.least
    return any(mib >= least_mib and cores >= least_cores for mib, cores in room.free)
