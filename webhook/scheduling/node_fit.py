"""Can a node run the pod at all, by its own rules (readiness, cordon, taints, selector, node
affinity) and by what its allocatable leaves? The rules that read the other pods are in
pod_affinity.py, topology_spread.py and volumes.py; feasible.py runs them all in
kube-scheduler's order.
"""

from __future__ import annotations

from typing import Any, cast

from ..json_types import JsonObject
from . import reasons
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


# A long `values` list (a pod may name 60,000 hosts) is read as a set, made once per list and
# kept while the list lives here: a decision reads the same pod's list for every node. An entry
# holds its list, so its id cannot be another list's while it is kept.
_SET_FROM = 16  # values; a shorter list is scanned
_SETS_KEPT = 64
_sets: dict[int, tuple[list[Any], frozenset[str]]] = {}


def _lookup(values: list[Any]) -> list[Any] | frozenset[str]:
    if len(values) <= _SET_FROM:
        return values
    kept = _sets.get(id(values))
    if kept is not None and kept[0] is values:
        return kept[1]
    if len(_sets) >= _SETS_KEPT:
        _sets.pop(next(iter(_sets)), None)
    found = frozenset(v for v in values if isinstance(v, str))  # a label value is a string
    _sets[id(values)] = (values, found)
    return found


def _expression_matches(expr: JsonObject, value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value is not None and value in _lookup(values)
    if op == "NotIn":
        return value is None or value not in _lookup(values)
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, want = int(value), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: JsonObject, labels: JsonObject, name: str) -> bool:
    """All expressions and fields of one nodeSelectorTerm; an empty term matches nothing."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for e in exprs:
        if not _expression_matches(e, labels.get(e.get("key"))):
            return False
    for f in fields:
        value = name if f.get("key") == "metadata.name" else None
        if not _expression_matches(f, value):
            return False
    return True


def matches_selector_and_affinity(pod_spec: JsonObject, node: JsonObject) -> bool:
    meta = node.get("metadata") or {}
    labels, name = meta.get("labels") or {}, meta.get("name", "")
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return True
    return any(term_matches(t, labels, name) for t in required.get("nodeSelectorTerms") or ())


def resources_reason(wants: Resources, allocatable: Resources, requested: Resources,
                     counted_elsewhere: tuple[str, ...]) -> str | None:
    """kube-scheduler 1.20's NodeResourcesFit: the pod count, then (when the pod requests
    anything) cpu, memory, ephemeral storage and every other resource it requests, each against
    what allocatable leaves. `counted_elsewhere`: resources other checks count (the Mthreads
    resources: the cards and allocatable.py)."""
    if wants.pods + requested.pods > allocatable.pods:
        return reasons.TOO_MANY_PODS
    if not (wants.cpu_milli or wants.memory_bytes or wants.other):
        return None
    if allocatable.cpu_milli < wants.cpu_milli + requested.cpu_milli:
        return reasons.INSUFFICIENT_CPU
    if allocatable.memory_bytes < wants.memory_bytes + requested.memory_bytes:
        return reasons.INSUFFICIENT_MEMORY
    if allocatable.amount(EPHEMERAL_STORAGE) < \
            wants.amount(EPHEMERAL_STORAGE) + requested.amount(EPHEMERAL_STORAGE):
        return reasons.INSUFFICIENT_EPHEMERAL_STORAGE
    for name, amount in wants.other:
        if name != EPHEMERAL_STORAGE and name not in counted_elsewhere and \
                allocatable.amount(name) < amount + requested.amount(name):
            return reasons.insufficient(name)
    return None


def node_rules_reason(pod_spec: JsonObject, node: JsonObject) -> str | None:
    """The node's own rules for the pod, without counting what runs there: Ready, schedulable,
    taints, nodeSelector and required node affinity. None when they let the pod in."""
    if not is_ready(node):
        return reasons.NOT_READY
    tolerations = pod_spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(
            tolerations, {"key": _UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
        return reasons.UNSCHEDULABLE
    if untolerated_taint(node, tolerations) is not None:
        return reasons.TAINTED
    if not matches_selector_and_affinity(pod_spec, node):
        return reasons.AFFINITY
    return None
