"""One decision: the node and cards for a pending pod, or the counted reasons why none fits.

A plain function of the pod and the indexed state (the other pods as the state's index holds
them: feasible.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from ..base.json_types import JsonObject
from ..model.cards import CORES_PER_CARD, UNIT_MIB
from ..model.config import Config
from ..model.hami import Device, encode
from ..model.pods import Kind, PodRequest
from . import reasons
from .allocatable import allocatable_reason, fit_node, fits_allocatable
from .card_fit import CardNeed, fit_cards, may_fit
from .cycle_state import CycleState, cycle_of
from .feasible import NodeChecks, node_checks
from .inventory import Card
from .nominated_fit import ahead_for, with_nominated
from .pod_facts import PodFacts, facts_of
from .request import PodAsk
from .resources import NO_DEVICES, Devices, Resources
from .score import best_node
from .shares import PodShare, card_shares
from .state import ClusterState, NodeInfo


@dataclass(frozen=True)
class Placement:
    node: str
    devices: tuple[tuple[Device, ...], ...]  # per container, init containers first
    gpu_index: str  # the card indexes in the order of the devices, each once
    share: PodShare  # what the pod will hold, to record before the watch confirms it

    @cached_property
    def allocated(self) -> str:
        """The allocation annotation's text: the binding writes it, and the watch that shows
        the pod bound compares it (scheduling/cache.py)."""
        return encode(self.devices)


@dataclass(frozen=True)
class NoFit:
    message: str
    rejected: Counter[str]


def place(pod: JsonObject, ask: PodAsk, state: ClusterState, config: Config,
          cycle: CycleState | None = None) -> Placement | NoFit:
    """The node and cards for the pod (`ask`: what it asks, read once by request.request_of),
    or why none fits. A pod that breaks an admission rule is the caller's (`ask.invalid`).
    `cycle`: what the decision reads of the pod, when the caller read it before taking the
    cache's lock (cycle_state.cycle_of of this pod and ask)."""
    cycle = cycle if cycle is not None else cycle_of(pod, ask, config)
    node_policy, gpu_policy = cycle.node_policy, cycle.gpu_policy
    checks = node_checks(pod, state, wants=ask.wants, rules=cycle.rules)
    wants = checks.wants
    request, need = ask.request, ask.need
    kind = request.kind if request is not None else Kind.NONE
    devices = ask.device_requests if need is not None else NO_DEVICES
    if need is not None:
        fit = first_fit(pod, ask, state, node_policy, gpu_policy, checks=checks)
        if fit is not None:
            return fit
    # Nothing fits (or no cards are asked for): every node is read, for its reason.
    rejected: Counter[str] = Counter()
    named: dict[str, list[str]] = {}
    fitting, chosen = [], {}
    for info in state.nodes.values():
        reason, cards = node_verdict(checks, need, devices, info, state, gpu_policy)
        if reason is not None:
            rejected[reason] += 1
            if reason == reasons.INCONSISTENT:
                named.setdefault(reason, []).append(f"{info.name}: {info.cards.problem}")
            continue
        fitting.append(info)
        chosen[info.name] = cards
    if not fitting:
        return NoFit(reasons.summary(len(state.nodes), rejected, named), rejected)
    node = best_node(fitting, state, kind, node_policy)
    return placement(pod, request, node.name, chosen[node.name], wants, devices, checks.facts)


def node_verdict(checks: NodeChecks, need: CardNeed | None, devices: Devices, info: NodeInfo,
                 state: ClusterState, gpu_policy: str) -> tuple[str | None, tuple[Card, ...]]:
    """One node's answer, the full check (a decision's reasons, `cards explain`): the node
    rules, then the cards and allocatable. (None, the cards) or (the reason, ())."""
    reason = checks.reason(info, state)
    if reason is not None or need is None:
        return reason, ()
    ahead = state.nominated.ahead_of(info.name, checks.priority, checks.uid) \
        if state.nominated.on_node else ()
    return fit_node(need, devices, info, state, gpu_policy, ahead)


def first_fit(pod: JsonObject, ask: PodAsk, state: ClusterState, node_policy: str, gpu_policy: str,
              consider: Callable[[str], bool] | None = None,
              node_rules: bool = True, checks: NodeChecks | None = None) -> Placement | None:
    """The one walk of every decision that chooses cards: the nodes in the node policy's
    order, and the first that fits is the one best_node picks, so most decisions read a few
    nodes instead of all of them. `consider`: the nodes it may choose (by name; None: all);
    `node_rules` False: the node rules are someone else's (kube-scheduler's, for the
    extender's filter), only the cards and allocatable are checked. `checks`: the node rules'
    reading of this pod and state, when the caller has it."""
    need, devices = ask.need, ask.device_requests
    assert need is not None
    if node_rules:
        checks = checks or node_checks(pod, state, wants=ask.wants)
        if checks.refusal is not None:
            return None
        wants = checks.wants
    else:
        checks, wants = None, ask.wants
    for name in state.in_order(node_policy, *need.least):
        if not may_fit(need, state.room[name]) or state.node_held_whole(name) \
                or (consider is not None and not consider(name)):
            continue
        info = state.nodes[name]
        if checks is not None and checks.reason(info, state):
            continue
        ahead = ahead_for(pod, name, state) if state.nominated.on_node else ()
        if ahead:  # the cards of the pods nominated here that it yields to are held
            usage, held, used = with_nominated(ahead, info, state, gpu_policy)
            if held or allocatable_reason(devices, used, info.device_limits, state.names):
                continue
            reason, cards = fit_cards(need, info.cards, usage, False, gpu_policy)
        elif not fits_allocatable(devices, info, state):  # the same test as fit_node's, sooner
            continue
        else:
            reason, cards = fit_cards(need, info.cards, state.card, False, gpu_policy)
        if reason is None:
            return placement(pod, ask.request, name, cards, wants, devices,
                             checks.facts if checks is not None else None)
    return None


def placement(pod: JsonObject, request: PodRequest | None, node: str, cards: tuple[Card, ...],
              wants: Resources, requested: Devices = NO_DEVICES,
              facts: PodFacts | None = None) -> Placement:
    """`requested`: the pod's requests of the Mthreads resources, counted against allocatable
    from the moment the share is assumed. `facts`: the pod's, when the decision read them."""
    uid = (pod.get("metadata") or {}).get("uid", "")
    devices: list[tuple[Device, ...]] = []
    if request is not None and request.kind is not Kind.NONE:
        free = iter(cards)
        for a in request.asks:
            if a.kind is Kind.SLICE:
                devices.append((Device(cards[0].id, a.slice_memory * UNIT_MIB, a.cores or 0),))
            elif a.kind is Kind.WHOLE:
                devices.append(tuple(Device(c.id, c.memory_mib, CORES_PER_CARD)
                                     for c in (next(free) for _ in range(a.cards))))
            else:
                devices.append(())
    by_id = {c.id: c for c in cards}
    order: list[int] = []
    for ds in devices:
        for d in ds:
            if by_id[d.card].index not in order:
                order.append(by_id[d.card].index)
    share = PodShare(uid, node, wants, card_shares(d for ds in devices for d in ds),
                     device_requests=requested, pod=facts if facts is not None else facts_of(pod))
    return Placement(node, tuple(devices), ",".join(str(i) for i in order), share)
