"""One decision: the node and cards for a pending pod, or the counted reasons why none fits.

A plain function of the pod and the indexed state; it reads no other pod.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from .. import annotations as keys
from ..cards import CORES_PER_CARD, UNIT_MIB
from ..config import Config
from ..hami import Device
from ..pods import Kind, PodRequest
from . import reasons
from .allocatable import fit_node, fits_allocatable
from .card_fit import CardNeed, card_ids, fit_cards, least_card, may_fit, need_of
from .inventory import Card
from .node_fit import node_reason
from .resources import NO_DEVICES, Devices, device_requests, pod_requests
from .score import best_node, policies
from .shares import CardShare, PodShare
from .state import ClusterState


@dataclass(frozen=True)
class Placement:
    node: str
    devices: tuple[tuple[Device, ...], ...]  # per container, init containers first
    gpu_index: str  # the card indexes in the order of the devices, each once
    share: PodShare  # what the pod will hold, to record before the watch confirms it


@dataclass(frozen=True)
class NoFit:
    message: str
    rejected: Counter


def decide(pod: dict, request: PodRequest | None, state: ClusterState, config: Config,
           need: CardNeed | None = None, devices: Devices | None = None):
    """Placement or NoFit. `request` None: the pod asks for no Mthreads card. `need` and
    `devices`: the request's card need and resource requests if the caller has them already
    (request.request_of), else read here."""
    spec = pod.get("spec") or {}
    node_policy, gpu_policy = policies(pod, config)
    wants = pod_requests(pod)
    kind = request.kind if request is not None else Kind.NONE
    if kind is Kind.NONE:
        need = None
    elif need is None:
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        need = need_of(request, card_ids(ann.get(keys.USE_CARDS)), card_ids(ann.get(keys.NOUSE_CARDS)))
    if need is None:
        devices = NO_DEVICES
    elif devices is None:
        devices = device_requests(pod, state.names)
    if need is not None:
        fit = first_fit(pod, request, spec, wants, devices, need, state, node_policy, gpu_policy)
        if fit is not None:
            return fit
    # Nothing fits (or no cards are asked for): every node is read, for its reason.
    rejected: Counter = Counter()
    named: dict[str, list[str]] = {}
    fitting, chosen = [], {}
    for info in state.nodes.values():
        reason = node_reason(spec, info.obj, info.allocatable, state.requested_on(info.name), wants)
        cards: tuple[Card, ...] = ()
        if reason is None and need is not None:
            reason, cards = fit_node(need, devices, info, state, gpu_policy)
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
    return placement(pod, request, node.name, chosen[node.name], wants, devices)


def first_fit(pod, request, spec, wants, devices: Devices, need, state: ClusterState,
              node_policy: str, gpu_policy: str,
              skip: Callable[[str], bool] | None = None) -> Placement | None:
    """The nodes in the node policy's order: the first that fits is the one best_node picks,
    so most decisions read a few nodes instead of all of them. `skip`: nodes not to consider
    (by name)."""
    for name in state.in_order(node_policy, *least_card(need)):
        if not may_fit(need, state.room[name]) or state.node_held_whole(name) \
                or (skip is not None and skip(name)):
            continue
        info = state.nodes[name]
        if node_reason(spec, info.obj, info.allocatable, state.requested_on(name), wants):
            continue
        if not fits_allocatable(devices, info, state):  # the same test as fit_node's, sooner
            continue
        reason, cards = fit_cards(need, info.cards, state.card, False, gpu_policy)
        if reason is None:
            return placement(pod, request, name, cards, wants, devices)
    return None


def placement(pod: dict, request: PodRequest | None, node: str, cards: tuple[Card, ...],
              wants, requested: Devices = NO_DEVICES) -> Placement:
    """`requested`: the pod's requests of the Mthreads resources, counted against allocatable
    from the moment the share is assumed."""
    uid = (pod.get("metadata") or {}).get("uid", "")
    devices: list[tuple[Device, ...]] = []
    if request is not None and request.kind is not Kind.NONE:
        free = iter(cards)
        for a in request.asks:
            if a.kind is Kind.SLICE:
                devices.append((Device(cards[0].id, a.memory * UNIT_MIB, a.cores or 0),))
            elif a.kind is Kind.WHOLE:
                devices.append(tuple(Device(c.id, c.memory_mib, CORES_PER_CARD)
                                     for c in (next(free) for _ in range(a.cards))))
            else:
                devices.append(())
    by_id = {c.id: c for c in cards}
    order: list[int] = []
    merged: dict[str, list[int]] = {}
    for ds in devices:
        for d in ds:
            if by_id[d.card].index not in order:
                order.append(by_id[d.card].index)
            m = merged.setdefault(d.card, [0, 0])
            m[0] += d.memory_mib
            m[1] += d.cores
    share = PodShare(uid, node, wants,
                     tuple(CardShare(card, mem, cores) for card, (mem, cores) in merged.items()),
                     devices=requested)
    return Placement(node, tuple(devices), ",".join(str(i) for i in order), share)
