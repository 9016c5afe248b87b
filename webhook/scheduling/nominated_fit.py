"""A nominated pod read from its object, and its cards held on its node for the pods that yield
to it (nominated.py): kube-scheduler's NodeResourcesFit would hold its extended resources there,
and the cards are ours to count (they are `ignoredByScheduler` in extender mode).

Which cards it will take is decided when it is, so its cards here are the ones the deciding
pod's card policy would give it now, the pods ahead placed first (highest priority first), and
the deciding pod's cards are chosen on what they leave. A nominated pod that does not fit yet
(its victims are still terminating) is placed as though the node's terminating pods were gone,
on top of what they hold; one that fits even so nowhere holds the node's cards whole for the
pods after it. Its requests of the Mthreads resources count against allocatable as the
kubelet would count them once it runs.
"""

from __future__ import annotations

from ..base.json_types import JsonObject
from ..model.cards import CORES_PER_CARD
from ..model.config import MthreadsConfig
from ..model.pods import Kind, resource_names
from .card_fit import CardNeed, Usage, fit_cards, need_of
from .inventory import Card
from .nominated import NominatedPod, nominated_node
from .one_copy import one_name
from .pod_facts import facts_of
from .pod_status import is_bound, uid_of
from .priority import pod_priority
from .request import read_ask
from .resources import Devices, device_requests
from .state import CardUsage, ClusterState, NodeInfo

Delta = dict[str, list[int]]  # card id -> (MiB, cores, whole, holders, containers) added


def nominated_of(pod: JsonObject, mt: MthreadsConfig) -> NominatedPod | None:
    """The pod as the index holds it while it is nominated and not bound; None otherwise."""
    node = nominated_node(pod.get("status"))
    if node is None or is_bound(pod):
        return None
    ask = read_ask(pod, mt)
    need = ask.need
    return NominatedPod(uid_of(pod), one_name(node), pod_priority(pod), ask.wants, facts_of(pod),
                        device_requests(pod, resource_names(mt)),
                        ask.request if need is not None else None,
                        need.use if need is not None else frozenset(),
                        need.nouse if need is not None else frozenset())


def ahead_for(pod: JsonObject, node: str, state: ClusterState) -> tuple[NominatedPod, ...]:
    """The pods nominated for `node` that `pod` yields to (nominated.NominatedPods.ahead_of)."""
    if not state.nominated.on_node:
        return ()
    uid = (pod.get("metadata") or {}).get("uid")
    return state.nominated.ahead_of(node, pod_priority(pod), uid if isinstance(uid, str) else "")


def with_nominated(ahead: tuple[NominatedPod, ...], info: NodeInfo, state: ClusterState,
                   gpu_policy: str, base: Usage | None = None, held: bool | None = None,
                   used: Devices | None = None, leaving: bool = True
                   ) -> tuple[Usage, bool, Devices]:
    """(card usage, cards held whole, Mthreads requests) of the node with the pods `ahead`
    placed on it, over `base`, `held` and `used` (the state's when None). `leaving`: a pod
    that does not fit is tried as though the node's terminating pods were gone (False: the
    caller's `base` has taken them away already, as the victim search does)."""
    usage = base if base is not None else state.card
    held = state.node_held_whole(info.name) if held is None else held
    used = state.devices_on(info.name) if used is None else used
    delta: Delta = {}
    overlay = _shifted(usage, delta, 1)
    freed: Usage | None = None
    for p in ahead:
        used = used + p.devices
        if p.request is None or p.request.kind is Kind.NONE:
            continue
        need = need_of(p.request, p.use, p.nouse)
        reason, cards = fit_cards(need, info.cards, overlay, held, gpu_policy)
        if reason is not None and leaving:
            freed = freed or _shifted(overlay, _terminating(info.name, state), -1)
            reason, cards = fit_cards(need, info.cards, freed, held, gpu_policy)
        if reason is not None:
            held = True  # no room for it even so: the node's cards wait for it
            continue
        _hold(delta, need, cards)
    return overlay, held, used


def _hold(delta: Delta, need: CardNeed, cards: tuple[Card, ...]) -> None:
    for c in cards:
        d = delta.setdefault(c.id, [0, 0, 0, 0, 0])
        if need.kind is Kind.WHOLE:  # as a whole card's share is counted: all of it
            d[0] += c.memory_mib
            d[1] += CORES_PER_CARD
            d[4] += 1
        else:
            d[0] += need.memory_mib
            d[1] += need.cores
            d[4] += need.containers
        d[3] += 1


def _terminating(node: str, state: ClusterState) -> Delta:
    """What the node's terminating pods hold on its cards."""
    delta: Delta = {}
    for uid, facts in (state.pods.on_node.get(node) or {}).items():
        share = state.shares.get(uid) if facts.terminating else None
        for c in share.cards if share is not None else ():
            d = delta.setdefault(c.card, [0, 0, 0, 0, 0])
            d[0] += c.memory_mib
            d[1] += c.cores
            d[2] += c.whole
            d[3] += 1
            d[4] += c.containers
    return delta


def _shifted(base: Usage, delta: Delta, sign: int) -> Usage:
    """`base` with `delta` added (sign 1) or taken away (-1); `delta` may grow after."""
    def usage(card_id: str) -> CardUsage:
        u = base(card_id)
        d = delta.get(card_id)
        if d is None:
            return u
        return CardUsage(u.memory_mib + sign * d[0], u.cores + sign * d[1], u.whole + sign * d[2],
                         u.holders + sign * d[3], u.containers + sign * d[4])
    return usage
