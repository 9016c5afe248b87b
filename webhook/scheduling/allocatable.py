"""Allocatable bounds what is handed out (SPEC 4): for each Mthreads resource, the requests of
the pods bound to a node, plus the new pod's, stay within the node's allocatable.

This is the kubelet's own admission arithmetic (the sum of the requests of the node's pods
against allocatable, each resource on its own), so a pod placed here is not refused by the
kubelet for these resources. The device plugin lowers allocatable for an unhealthy card but
does not say which card it is: the cards (from capacity) are chosen as before, and allocatable
bounds the node's total (docs/allocator.md).
"""

from __future__ import annotations

from . import reasons
from .card_fit import CardNeed, fit_cards
from .inventory import Card
from .nominated import NominatedPod
from .nominated_fit import with_nominated
from .resources import DeviceLimits, Devices
from .state import ClusterState, NodeInfo


def allocatable_reason(requested: Devices, used: Devices, limits: DeviceLimits,
                       names: tuple[str, str, str]) -> str | None:
    """`Insufficient <resource>` for the first resource (count, memory, cores) the pod would
    take beyond allocatable, else None. A resource the pod does not request never refuses it;
    one allocatable does not list (None) is bounded by the cards alone."""
    for want, have, limit, name in zip(requested, used, limits, names):
        if want and limit is not None and have + want > limit:
            return reasons.insufficient(name)
    return None


def fits_allocatable(requested: Devices, info: NodeInfo, state: ClusterState) -> bool:
    return allocatable_reason(requested, state.devices_on(info.name), info.device_limits,
                              state.names) is None


def fit_node(need: CardNeed, requested: Devices, info: NodeInfo, state: ClusterState,
             gpu_policy: str, ahead: tuple[NominatedPod, ...] = ()
             ) -> tuple[str | None, tuple[Card, ...]]:
    """The card checks (from capacity), then allocatable: (None, the cards) or (the node's one
    reason, ()). Allocatable comes last, so its reason says that the cards have room but the
    node's device plugin reports less (an unhealthy card, a plugin restarting). `ahead`: the
    pods nominated for the node that the pod yields to, their cards held (nominated_fit.py)."""
    if ahead:
        usage, held, used = with_nominated(ahead, info, state, gpu_policy)
    else:
        usage, held, used = state.card, state.node_held_whole(info.name), state.devices_on(info.name)
    reason, cards = fit_cards(need, info.cards, usage, held, gpu_policy)
    if reason is None:
        reason = allocatable_reason(requested, used, info.device_limits, state.names)
    return reason, (() if reason else cards)


def for_node(reason: str | None, info: NodeInfo) -> str | None:
    """A node's reason as one node's answer: a node whose capacity cannot be read is named,
    with why (the extender's FailedNodes, counted by kube-scheduler as they are)."""
    if reason == reasons.INCONSISTENT and info.cards.problem:
        return reasons.inconsistent(info.name, info.cards.problem)
    return reason
