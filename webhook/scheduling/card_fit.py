"""Which cards of a node can serve the pod's request (SPEC 4).

The cards go through a fixed pipeline of filters; the first filter that leaves fewer
cards than the pod needs names the node's reason. All slices of a pod share one card;
N whole cards take N idle cards of the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..cards import CORES_PER_CARD, UNIT_MIB
from ..pods import Kind, PodRequest
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


def _filters(need: CardNeed, node: NodeCards, usage: Usage
             ) -> Iterator[tuple[str, Callable[[Card], bool]]]:
    yield reasons.TYPE_MISMATCH, lambda c: c.model.units in need.model_units
    yield reasons.UUID_MISMATCH, lambda c: (not need.use or c.id in need.use) and c.id not in need.nouse
    yield reasons.CORDONED, lambda c: c.id not in node.settings.cordoned
    if need.kind is Kind.WHOLE:
        yield reasons.EXCLUSIVE_CONFLICT, lambda c: usage(c.id).idle
        return
    yield reasons.EXCLUSIVE_CONFLICT, lambda c: not held_whole(c, usage(c.id))
    yield reasons.TIME_SLICING_EXHAUSTED, \
        lambda c: usage(c.id).containers + need.containers <= node.settings.max_instances
    if need.any_coreless:
        yield reasons.CORES_EXHAUSTED, lambda c: usage(c.id).cores < CORES_PER_CARD
    yield reasons.INSUFFICIENT_CARD_MEMORY, lambda c: c.memory_mib - usage(c.id).memory_mib >= need.memory_mib
    yield reasons.INSUFFICIENT_CARD_CORES, lambda c: CORES_PER_CARD - usage(c.id).cores >= need.cores


def card_reasons(need: CardNeed, node: NodeCards, usage: Usage) -> list[tuple[Card, str | None]]:
    """Each card of the node with the first filter that refuses it on its own, or None: the
    same filters as fit_cards, card by card (fit_cards names the one that leaves too few)."""
    filters = list(_filters(need, node, usage))
    return [(c, next((reason for reason, keep in filters if not keep(c)), None))
            for c in node.cards]


def fraction_used(card: Card, u: CardUsage) -> float:
    return card_used(card.memory_mib, u)


def fit_cards(need: CardNeed, node: NodeCards, usage: Usage, node_held_whole: bool,
              gpu_policy: str) -> tuple[str | None, tuple[Card, ...]]:
    """(None, chosen cards) or (reason, ())."""
    if node.problem:
        return reasons.INCONSISTENT, ()
    if len(node.cards) < need.cards:
        return reasons.NO_DEVICE, ()
    if node_held_whole:
        return reasons.EXCLUSIVE_CONFLICT, ()
    if need.kind is not Kind.WHOLE and need.cards == 1:
        best = _best_slice_card(need, node, usage, gpu_policy == "binpack")
        if best is not None:
            return None, (best,)
    candidates = list(node.cards)  # none fits (or whole cards): the filters name the reason
    for reason, keep in _filters(need, node, usage):
        candidates = [c for c in candidates if keep(c)]
        if len(candidates) < need.cards:
            return reason, ()
    if need.kind is Kind.WHOLE:
        return None, tuple(candidates[:need.cards])  # all idle: lowest indexes first
    sign = -1 if gpu_policy == "binpack" else 1  # spread: least used card first
    best = min(candidates, key=lambda c: (sign * fraction_used(c, usage(c.id)), c.index))
    return None, (best,)


def _best_slice_card(need: CardNeed, node: NodeCards, usage: Usage, binpack: bool) -> Card | None:
    """The card fit_cards' filters and choice give a pod of slices, in one pass over the cards
    (the filters one after another cost a filter's decisions twice over: measured in the
    extender, where this is on kube-scheduler's path for every pod); None when no card passes
    them all, and the filters then say why."""
    cordoned, limit = node.settings.cordoned, node.settings.max_instances
    best, best_key = None, None
    for c in node.cards:
        if c.model.units not in need.model_units or (need.use and c.id not in need.use) \
                or c.id in need.nouse or c.id in cordoned:
            continue
        u = usage(c.id)
        if held_whole(c, u) or u.containers + need.containers > limit \
                or (need.any_coreless and u.cores >= CORES_PER_CARD) \
                or c.memory_mib - u.memory_mib < need.memory_mib \
                or CORES_PER_CARD - u.cores < need.cores:
            continue
        used = card_used(c.memory_mib, u)
        key = (-used if binpack else used, c.index)
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best


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
    least_mib, least_cores = least_card(need)
    return any(mib >= least_mib and cores >= least_cores for mib, cores in room.free)
