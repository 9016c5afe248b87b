"""The extender's answers as plain functions of the pod and the indexed state.

They reuse the allocator's decision layer as it is: the card checks, allocatable and card
policy (`allocatable.fit_node`), the node score (`score.node_used`), the policies (`score.policies`),
and the annotation content (`decide.placement`). kube-scheduler owns every node-level rule
(taints, selectors, affinities, cpu/memory, topology spread, volumes); the extender only
answers "can this node's cards serve the pod, and which cards".
"""

from __future__ import annotations

from ..base.json_types import JsonObject
from ..model.config import Config
from ..model.pods import Kind
from ..scheduling.allocatable import fit_node, for_node
from ..scheduling.decide import Placement, first_fit, placement
from ..scheduling.feasible import node_checks
from ..scheduling.inventory import Card
from ..scheduling.node_fit import NodeRules, node_rules_of
from ..scheduling.nominated_fit import ahead_for
from ..scheduling.request import PodAsk
from ..scheduling.score import best_node, node_used, policies
from ..scheduling.state import ClusterState

MAX_PRIORITY = 10  # kube-scheduler's MaxExtenderPriority (extender/v1)
NOT_IN_CACHE = "node is not in the extender's cache yet"


def cards_on(pod: JsonObject, ask: PodAsk, node: str, state: ClusterState,
             config: Config) -> tuple[str | None, tuple[Card, ...]]:
    """(None, the cards the card policy picks on `node`) or (the node's one reason, ())."""
    if ask.invalid:
        return ask.invalid, ()
    info = state.nodes.get(node)
    if info is None:
        return NOT_IN_CACHE, ()
    if ask.need is None:
        return None, ()
    _, gpu_policy = policies(pod, config)
    # the pods nominated for the node that it yields to keep their cards (kube-scheduler
    # holds the rest of what they request: nominated.py)
    reason, cards = fit_node(ask.need, ask.device_requests, info, state, gpu_policy,
                             ahead_for(pod, node, state))
    return for_node(reason, info), cards


def fitting_nodes(pod: JsonObject, ask: PodAsk, names: list[str], state: ClusterState,
                  config: Config) -> tuple[dict[str, tuple[Card, ...]], dict[str, str]]:
    """({node: the cards the card policy picks} where the cards fit, {node: reason} for the
    others), in the order given."""
    fits: dict[str, tuple[Card, ...]] = {}
    failed: dict[str, str] = {}
    for name in names:
        reason, cards = cards_on(pod, ask, name, state, config)
        if reason is None:
            fits[name] = cards
        else:
            failed[name] = reason
    return fits, failed


def pick(pod: JsonObject, ask: PodAsk, names: list[str], state: ClusterState,
         config: Config) -> tuple[Placement | None, dict[str, str]]:
    """The filter's choice among the nodes kube-scheduler passed: the node the node policy
    picks among those whose cards fit, with the cards the card policy picks there, and no
    reasons (the other nodes are simply not chosen); or None and {node: reason} for every node
    when none fits."""
    node_policy, gpu_policy = policies(pod, config)
    if ask.need is not None and not ask.invalid:
        # the first of kube-scheduler's nodes that fits in the policy's order is the one the
        # policy picks among them: a filter reads a few nodes
        found = first_fit(pod, ask, state, node_policy, gpu_policy, set(names).__contains__,
                          node_rules=False)
        if found is not None:
            return found, {}
    fitting, failed = fitting_nodes(pod, ask, names, state, config)
    if not fitting:
        return None, failed
    kind = ask.request.kind if ask.request is not None else Kind.NONE
    node = best_node([state.nodes[n] for n in fitting], state, kind, node_policy).name
    return placement(pod, ask.request, node, fitting[node], ask.wants, ask.device_requests), failed


def room_outside(pod: JsonObject, ask: PodAsk, names: list[str], state: ClusterState,
                 config: Config, rules: NodeRules | None = None) -> str | None:
    """A node that kube-scheduler did not pass whose cards fit the pod and that passes the
    allocator's node checks (kube-scheduler's filters, scheduling/feasible.py): the node
    the allocator would choose among those, or None. kube-scheduler asks about a sample of its
    feasible nodes only (docs/extender.md, "Node sample"), so room may lie outside it.
    `rules`: the pod's node rules, read before the lock (node_fit.node_rules_of)."""
    if ask.need is None or ask.invalid:
        return None
    node_policy, gpu_policy = policies(pod, config)
    given = set(names)
    found = first_fit(pod, ask, state, node_policy, gpu_policy, lambda name: name not in given,
                      checks=node_checks(pod, state, binder=True, wants=ask.wants, rules=rules))
    return found.node if found is not None else None


def scores(pod: JsonObject, ask: PodAsk, names: list[str], state: ClusterState,
           config: Config) -> list[tuple[str, int]]:
    """0..MAX_PRIORITY per node from the node policy: binpack favours the busiest node."""
    node_policy, _ = policies(pod, config)
    kind = ask.request.kind if ask.request is not None else Kind.NONE
    out = []
    for name in names:
        info = state.nodes.get(name)
        if info is None:
            out.append((name, 0))
            continue
        used = min(max(node_used(info, state, kind), 0.0), 1.0)
        value = used if node_policy == "binpack" else 1.0 - used
        out.append((name, int(round(value * MAX_PRIORITY))))
    return out


def choose(pod: JsonObject, ask: PodAsk, node: str, state: ClusterState,
           config: Config, rules: NodeRules | None = None) -> Placement | str:
    """The placement on the node a bind names, or the reason the node or its cards do not
    take the pod now. `rules`: as room_outside's."""
    reason = node_refusal(pod, node, state, rules)
    if reason is not None:
        return reason
    reason, cards = cards_on(pod, ask, node, state, config)
    if reason is not None:
        return reason
    return placement(pod, ask.request, node, cards, ask.wants, ask.device_requests)


def node_refusal(pod: JsonObject, node: str, state: ClusterState,
                 rules: NodeRules | None = None) -> str | None:
    """Why the node's own rules (Ready, schedulable, taints, selector, node affinity) refuse
    the pod, or None. A bind names its node: this is checked again there, whoever sent it,
    since a binding skips every check of kube-scheduler's."""
    info = state.nodes.get(node)
    if info is None:
        return NOT_IN_CACHE
    return (rules or node_rules_of(pod.get("spec") or {})).reason(info.obj)
