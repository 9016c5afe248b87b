"""Which pods to evict so that a pod's cards fit on a node: the extender's `preempt` answer.

kube-scheduler cannot see the cards (the Mthreads resources are `ignoredByScheduler`), so the
victims it proposes on a node free cpu/memory/pods only, and are often none at all. For each
node it proposes, the extender keeps kube-scheduler's victims and adds the fewest pods of
lower priority holding cards there whose removal lets the pod's cards fit; a node where no
such set exists is dropped. A pod of equal or higher priority is never a victim.

Plain functions on the state; the priorities and the pods already terminating come from the
caller (the extender's cache, or `cards explain`'s, which asks the same as a dry run).
"""

from __future__ import annotations

from itertools import combinations
from typing import Iterable

from ..base.json_types import JsonObject
from ..model.config import Config
from .allocatable import allocatable_reason
from .cache import Holder
from .card_fit import Usage, fit_cards
from .nominated import NominatedPod
from .nominated_fit import ahead_for, with_nominated
from .priority import pod_priority
from .request import PodAsk
from .score import policies
from .shares import PodShare
from .state import CardUsage, ClusterState

EXACT_UP_TO = 3  # victims: every set up to this size is tried, smallest first
EXACT_BUDGET = 5000  # fit checks for the exact search; beyond, the greedy answer


def _without(state: ClusterState, removed: Iterable[PodShare]) -> tuple[Usage, int]:
    """The card usage of the state with `removed` taken away, and the node's whole-hold count."""
    delta: dict[str, list[int]] = {}
    whole_node = 0
    for s in removed:
        whole_node += s.whole_node
        for c in s.cards:
            d = delta.setdefault(c.card, [0, 0, 0, 0, 0])
            d[0] += c.memory_mib
            d[1] += c.cores
            d[2] += c.whole
            d[3] += 1
            d[4] += c.containers

    def usage(card_id: str) -> CardUsage:
        u = state.card(card_id)
        d = delta.get(card_id)
        if d is None:
            return u
        return CardUsage(u.memory_mib - d[0], u.cores - d[1], u.whole - d[2], u.holders - d[3],
                         u.containers - d[4])
    return usage, whole_node


def fits_without(ask: PodAsk, node: str, state: ClusterState, gpu_policy: str,
                 removed: list[PodShare], ahead: tuple[NominatedPod, ...] = ()) -> bool:
    """`ahead`: the pods nominated for the node that the pod yields to: they keep their
    room, as kube-scheduler's victim search runs the filters with them."""
    info = state.nodes.get(node)
    if info is None or ask.need is None:
        return False
    usage, freed_whole = _without(state, removed)
    nu = state.node_usage.get(node)
    held_whole = bool(nu and nu.whole_node - freed_whole > 0)
    # and allocatable (an unhealthy card lowers it): the victims' requests leave the node's sum
    used = state.devices_on(node)
    for s in removed:
        used = used - s.device_requests
    if ahead:
        usage, held_whole, used = with_nominated(ahead, info, state, gpu_policy, usage,
                                                 held_whole, used, leaving=False)
    reason, _ = fit_cards(ask.need, info.cards, usage, held_whole, gpu_policy)
    if reason is not None:
        return False
    return allocatable_reason(ask.device_requests, used, info.device_limits, state.names) is None


def victims_on(pod: JsonObject, ask: PodAsk, node: str, state: ClusterState, config: Config,
               holders: dict[str, Holder], proposed: list[str]) -> list[str] | None:
    """The uids to evict on `node` (kube-scheduler's `proposed` first), or None if no set of
    pods of lower priority frees room for the pod's cards there. `holders`: the pods bound on
    the node, by uid."""
    priority = pod_priority(pod)
    _, gpu_policy = policies(pod, config)  # read once: fits_without runs up to EXACT_BUDGET times
    if any(holders[u].priority >= priority for u in proposed if u in holders):
        return None  # never a pod of equal or higher priority
    gone = [h.share for u, h in holders.items() if u in proposed or h.terminating]
    ahead = ahead_for(pod, node, state)
    if fits_without(ask, node, state, gpu_policy, gone, ahead):
        return list(proposed)
    candidates = sorted(
        (h for u, h in holders.items()
         if u not in proposed and not h.terminating and h.share.cards and h.priority < priority),
        key=lambda h: (h.priority, -_size(h.share), h.share.uid))
    if not fits_without(ask, node, state, gpu_policy, gone + [h.share for h in candidates], ahead):
        return None
    budget = EXACT_BUDGET
    for k in range(1, min(EXACT_UP_TO, len(candidates)) + 1):
        for chosen in combinations(candidates, k):
            budget -= 1
            if budget < 0:
                break
            if fits_without(ask, node, state, gpu_policy, gone + [h.share for h in chosen], ahead):
                return list(proposed) + [h.share.uid for h in chosen]
    # Greedy, as kube-scheduler's own victim selection: evict them all, then spare each one
    # (higher priority first, then smaller first) whose return still leaves room.
    evicted = list(candidates)
    for h in sorted(candidates, key=lambda h: (-h.priority, _size(h.share), h.share.uid)):
        rest = [e for e in evicted if e is not h]
        if fits_without(ask, node, state, gpu_policy, gone + [e.share for e in rest], ahead):
            evicted = rest
    return list(proposed) + [h.share.uid for h in evicted]


def _size(share: PodShare) -> int:
    return sum(c.memory_mib for c in share.cards)
