"""Why a pod waits, and what would make room (`cards explain`, `cards what-if`): per node the
allocator's own answer, card by card where the cards are the reason, and the fewest bound pods
of lower priority whose removal would let it fit somewhere (the extender's victim search, as a
dry run).

Plain functions on the state, asking the checks a decision asks (decide.place and
node_verdict, card_fit.card_reasons, preemption.victims_on): nothing here is written or
evicted.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model.cards import CORES_PER_CARD, UNIT_MIB, model_name
from ..model.config import Config
from ..model.pods import Kind
from . import reasons
from .cache import Holder
from .card_fit import CardNeed, Usage, card_reasons
from .decide import Placement, node_verdict, place
from .feasible import NodeChecks, node_checks
from .inventory import Card, NodeCards
from .nominated_fit import with_nominated
from .preemption import victims_on
from .request import PodAsk
from .score import policies
from .state import CardUsage, ClusterState, NodeInfo

CARD_REASONS = frozenset({
    reasons.TYPE_MISMATCH, reasons.UUID_MISMATCH, reasons.CORDONED, reasons.EXCLUSIVE_CONFLICT,
    reasons.TIME_SLICING_EXHAUSTED, reasons.CORES_EXHAUSTED, reasons.INSUFFICIENT_CARD_MEMORY,
    reasons.INSUFFICIENT_CARD_CORES})


@dataclass(frozen=True)
class CardWhy:
    card: Card
    reason: str | None  # the first check the card fails on its own; None: it could take the pod
    detail: str  # in figures: "40 of 96 units free, the pod needs 64"


@dataclass(frozen=True)
class NodeWhy:
    node: str
    reason: str | None  # the node's one reason, in the allocator's words; None: the pod fits
    detail: str = ""  # what the reason does not say (the figures of allocatable, say)
    cards: tuple[CardWhy, ...] = ()  # card by card, when the cards are the reason
    chosen: tuple[Card, ...] = ()  # the cards it would take, when it fits


@dataclass(frozen=True)
class Room:
    node: str
    victims: tuple[Holder, ...]  # lowest priority first; none: the pods leaving there suffice


@dataclass(frozen=True)
class Explanation:
    priority: int
    invalid: str | None = None  # the pod breaks an admission rule: the whole message
    placement: Placement | None = None  # where the allocator would bind it now
    message: str = ""  # else the FailedScheduling message it would get now
    nodes: tuple[NodeWhy, ...] = ()  # by name
    room: Room | None = None  # the fewest removals that let it fit; None: no removal would
    asks_cards: bool = False  # the cards decide (else removing card holders is no answer)


def explain(pod: JsonObject, ask: PodAsk, state: ClusterState, config: Config,
            holders: dict[str, dict[str, Holder]], priority: int) -> Explanation:
    """`holders`: per node the bound pods as preemption weighs them (SchedulerCache.holders)."""
    if ask.invalid:
        return Explanation(priority, invalid=ask.invalid)
    result = place(pod, ask, state, config)
    checks = node_checks(pod, state, wants=ask.wants)
    _, gpu_policy = policies(pod, config)
    nodes = tuple(_node_why(checks, ask, info, state, gpu_policy)
                  for _, info in sorted(state.nodes.items()))
    if isinstance(result, Placement):
        return Explanation(priority, placement=result, nodes=nodes, asks_cards=ask.need is not None)
    room = _room(pod, ask, state, config, checks, holders) if ask.need is not None else None
    return Explanation(priority, message=result.message, nodes=nodes, room=room,
                       asks_cards=ask.need is not None)


def _node_why(checks: NodeChecks, ask: PodAsk, info: NodeInfo, state: ClusterState,
              gpu_policy: str) -> NodeWhy:
    need = ask.need
    reason, chosen = node_verdict(checks, need, ask.device_requests, info, state, gpu_policy)
    if reason is None:
        return NodeWhy(info.name, None, chosen=chosen)
    if need is None or checks.reason(info, state) is not None:
        return NodeWhy(info.name, reason)  # the node's own rules: their words say it
    usage: Usage = state.card
    held = state.node_held_whole(info.name)
    ahead = state.nominated.ahead_of(info.name, checks.priority, checks.uid) \
        if state.nominated.on_node else ()
    if ahead:  # the cards as the pods nominated there that it yields to leave them
        usage, held, _ = with_nominated(ahead, info, state, gpu_policy)
    if reason in CARD_REASONS and not held:
        cards = tuple(CardWhy(c, why, card_detail(why, c, usage(c.id), need, info.cards))
                      for c, why in card_reasons(need, info.cards, usage))
        return NodeWhy(info.name, reason, cards=cards)
    if held and not state.node_held_whole(info.name):
        return NodeWhy(info.name, reason, "its cards wait for a pod nominated there "
                                          "(status.nominatedNodeName) of equal or higher priority")
    return NodeWhy(info.name, reason, _node_detail(reason, need, ask, info, state))


def _units(mib: int) -> str:
    return f"{mib / UNIT_MIB:g}"


def card_detail(reason: str | None, card: Card, u: CardUsage, need: CardNeed,
                node: NodeCards) -> str:
    """Why the card alone refuses the need, in figures (or what it has free)."""
    limit = node.settings.max_instances
    free_mib, free_cores = card.memory_mib - u.memory_mib, CORES_PER_CARD - u.cores
    if reason == reasons.TYPE_MISMATCH:
        models = ", ".join(model_name(m) for m in sorted(need.model_units))
        return f"model {card.model.name}; the pod's request is for {models}"
    if reason == reasons.UUID_MISMATCH:
        if need.use and card.id not in need.use:
            return "not in the pod's mthreads.ai/use-gpuuuid"
        return "in the pod's mthreads.ai/nouse-gpuuuid"
    if reason == reasons.CORDONED:
        return "cordoned (the node's hami.io/device-cordon): takes no new pod"
    if reason == reasons.EXCLUSIVE_CONFLICT:
        if need.kind is Kind.WHOLE:
            return f"not idle: {u.holders} pod(s) hold a share, the pod needs it whole"
        return "held whole by a pod" if u.whole else "full: all its memory and cores are handed out"
    if reason == reasons.TIME_SLICING_EXHAUSTED:
        return f"{u.containers} of {limit} containers, the pod adds {need.containers}"
    if reason == reasons.CORES_EXHAUSTED:
        return f"all {CORES_PER_CARD} core groups reserved; a slice without cores needs one free"
    if reason == reasons.INSUFFICIENT_CARD_MEMORY:
        return (f"{_units(free_mib)} of {card.model.units} units free, "
                f"the pod needs {_units(need.memory_mib)}")
    if reason == reasons.INSUFFICIENT_CARD_CORES:
        return f"{free_cores} of {CORES_PER_CARD} core groups free, the pod needs {need.cores}"
    return (f"could take it: {_units(free_mib)} of {card.model.units} units, {free_cores} core "
            f"groups and {limit - u.containers} of {limit} containers free")


def _node_detail(reason: str, need: CardNeed, ask: PodAsk, info: NodeInfo,
                 state: ClusterState) -> str:
    if reason == reasons.INCONSISTENT:
        return info.cards.problem or ""
    if reason == reasons.NO_DEVICE:
        return f"{len(info.cards.cards)} card(s); the pod asks for {need.cards}"
    if reason == reasons.EXCLUSIVE_CONFLICT:  # node_held_whole
        return "an unreadable allocation holds every card of the node"
    for want, have, limit, name in zip(ask.device_requests, state.devices_on(info.name),
                                       info.device_limits, state.names):
        if reason == reasons.insufficient(name):
            return (f"allocatable {name} is {limit}; the pods bound there request {have}, "
                    f"the pod {want}")
    return ""


def _room(pod: JsonObject, ask: PodAsk, state: ClusterState, config: Config, checks: NodeChecks,
          holders: dict[str, dict[str, Holder]]) -> Room | None:
    """The node where the fewest removals (then the lowest priorities) let the pod's cards fit,
    among the nodes whose other rules let it in; None when there is none."""
    best: tuple[tuple[int, int, int, str], Room] | None = None
    for name, info in sorted(state.nodes.items()):
        if checks.reason(info, state) is not None:
            continue  # removing card holders does not change that
        on_node = holders.get(name, {})
        uids = victims_on(pod, ask, name, state, config, on_node, [])
        if uids is None:
            continue
        victims = tuple(sorted((on_node[u] for u in uids), key=lambda h: (h.priority, h.share.uid)))
        priorities = [h.priority for h in victims]
        key = (len(victims), max(priorities, default=0), sum(priorities), name)
        if best is None or key < best[0]:
            best = key, Room(name, victims)
    return best[1] if best is not None else None
