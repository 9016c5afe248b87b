"""Can a node run the pod at all, by its own rules (readiness, cordon, taints, selector, node
affinity) and by what its allocatable leaves? The rules that read the other pods are in
pod_affinity.py, topology_spread.py and volumes.py; feasible.py runs them all in
kube-scheduler's order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from ..base.json_types import JsonObject
from . import reasons
from .node_selector import NodeSelection, selection_of, term_rule
from .resources import Resources

_UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
EPHEMERAL_STORAGE = "ephemeral-storage"


def is_ready(node: JsonObject) -> bool:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def tolerates(tolerations: list[JsonObject], taint: JsonObject) -> bool:
    for t in tolerations or ():
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if op == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(node: JsonObject, tolerations: list[JsonObject]) -> JsonObject | None:
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return cast(JsonObject, taint)
    return None


def term_matches(term: JsonObject, labels: JsonObject, name: str) -> bool:
    """All expressions and fields of one nodeSelectorTerm; an empty term matches nothing."""
    return term_rule(term).matches(labels, name)


def matches_selector_and_affinity(pod_spec: JsonObject, node: JsonObject) -> bool:
    return selection_of(pod_spec).matches(node)


def resources_reason(wants: Resources, allocatable: Resources, requested: Resources,
                     counted_elsewhere: tuple[str, ...]) -> str | None:
    """kube-scheduler's NodeResourcesFit of today (1.28 on; upstream's fitsRequest): the pod
    count, then each of cpu, memory, ephemeral storage and every other resource the pod
    requests (more than 0 of), against what allocatable leaves. A resource the pod does not
    request is not compared (1.20 compared cpu, memory and ephemeral storage whenever the pod
    requested anything, so one bound pod over allocatable closed the node to every pod).
    `counted_elsewhere`: resources other checks count (the Mthreads resources: the cards and
    allocatable.py)."""
    if wants.pods + requested.pods > allocatable.pods:
        return reasons.TOO_MANY_PODS
    if wants.cpu_milli and allocatable.cpu_milli < wants.cpu_milli + requested.cpu_milli:
        return reasons.INSUFFICIENT_CPU
    if wants.memory_bytes and allocatable.memory_bytes < wants.memory_bytes + requested.memory_bytes:
        return reasons.INSUFFICIENT_MEMORY
    storage = wants.amount(EPHEMERAL_STORAGE)
    if storage and allocatable.amount(EPHEMERAL_STORAGE) < storage + requested.amount(EPHEMERAL_STORAGE):
        return reasons.INSUFFICIENT_EPHEMERAL_STORAGE
    for name, amount in wants.other:  # only the resources the pod requests: none is 0 here
        if name != EPHEMERAL_STORAGE and name not in counted_elsewhere and \
                allocatable.amount(name) < amount + requested.amount(name):
            return reasons.insufficient(name)
    return None


@dataclass(frozen=True, slots=True)
class NodeRules:
    """The pod's side of the node's own rules, read once per decision (cycle_state.py)."""

    tolerations: list[JsonObject]
    selection: NodeSelection

    def reason(self, node: JsonObject) -> str | None:
        """Ready, schedulable, taints, nodeSelector and required node affinity, without
        counting what runs there. None when they let the pod in."""
        if not is_ready(node):
            return reasons.NOT_READY
        if (node.get("spec") or {}).get("unschedulable") and not tolerates(
                self.tolerations, {"key": _UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
            return reasons.UNSCHEDULABLE
        if untolerated_taint(node, self.tolerations) is not None:
            return reasons.TAINTED
        if not self.selection.matches(node):
            return reasons.AFFINITY
        return None

    @property
    def cost(self) -> int:
        """What one node's check reads at most: tolerations, selector entries and terms, each
        against the node's few taints or labels."""
        return 1 + len(self.tolerations) + self.selection.cost


def node_rules_of(pod_spec: JsonObject) -> NodeRules:
    tolerations = pod_spec.get("tolerations") or []
    return NodeRules(tolerations if isinstance(tolerations, list) else [], selection_of(pod_spec))


def node_rules_reason(pod_spec: JsonObject, node: JsonObject) -> str | None:
    """The node's own rules for the pod (NodeRules.reason), read from the pod for one node."""
    return node_rules_of(pod_spec).reason(node)
