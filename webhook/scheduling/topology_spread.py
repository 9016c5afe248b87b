"""kube-scheduler's PodTopologySpread filter of today, for the `DoNotSchedule` constraints.

Per decision (PreFilter), per constraint: its domains, the values of its topology key on the
nodes that carry every constraint's key and pass the constraint's node inclusion policies
(`nodeAffinityPolicy`, Honor when absent: the pod's nodeSelector and required node affinity;
`nodeTaintsPolicy`, Ignore when absent, Honor: the node's NoSchedule and NoExecute taints the
pod does not tolerate), each with the number of the pod's namespace's pods, not terminating,
that the selector matches on those same nodes (from 1.24; 1.20 counted them on every node of an
eligible domain); and the smallest count. The selector is `labelSelector` ANDed with
`key In (the pod's value)` for each of `matchLabelKeys` the pod carries, as kube-scheduler does;
from 1.34 the API server merges them into `labelSelector` at creation, and a selector merged
twice selects the same pods. Per node (Filter): a node without a key is refused; else the count
of its domain, plus one if the pod matches the selector itself, minus the smallest (0 when the
domains are fewer than `minDomains`, 1 when absent), may not exceed maxSkew.

A 1.20 API server prunes the newer fields, so the same rules give 1.20's answer there but for
the counting of 1.24. A field of the wrong shape (a pod from a file) is a reason naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from ..base.json_types import JsonObject
from .label_selector import Requirement, Selector, selector_of
from .pod_facts import PodFacts
from .pod_index import PodIndex
from .reasons import SPREAD, SPREAD_MISSING_LABEL

Labels = Mapping[str, str]
FIELD = "spec.topologySpreadConstraints"
_POLICIES = ("Honor", "Ignore")
_NO_MINIMUM = 2**31 - 1  # the smallest count of a constraint without domains (kube-scheduler's)


@dataclass(frozen=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int = 1
    honor_affinity: bool = True  # nodeAffinityPolicy
    honor_taints: bool = False  # nodeTaintsPolicy


def constraints_of(pod: JsonObject) -> tuple[Constraint, ...] | str:
    """The pod's DoNotSchedule constraints, or the reason naming a field of the wrong shape."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    raw = spec.get("topologySpreadConstraints") or []
    if not isinstance(raw, list):
        return f"{FIELD} is not a list"
    labels = meta.get("labels") or {}
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            return f"{FIELD}[{i}] is not a mapping"
        if c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        made = _constraint(c, labels if isinstance(labels, dict) else {})
        if isinstance(made, str):
            return f"{FIELD}[{i}].{made}"
        out.append(made)
    return tuple(out)


def _constraint(c: JsonObject, labels: Labels) -> Constraint | str:
    max_skew, min_domains, key = c.get("maxSkew") or 0, c.get("minDomains"), c.get("topologyKey")
    if not isinstance(key, str):
        return f"topologyKey is not a label key: {key!r}"
    if not _integer(max_skew):
        return f"maxSkew is not an integer: {max_skew!r}"
    if min_domains is not None and not _integer(min_domains):
        return f"minDomains is not an integer: {min_domains!r}"
    policies = []
    for name, absent in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        policy = c.get(name)
        if policy is not None and policy not in _POLICIES:
            return f"{name} is neither Honor nor Ignore: {policy!r}"
        policies.append((policy or absent) == "Honor")
    keys = c.get("matchLabelKeys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return f"matchLabelKeys is not a list of label keys: {keys!r}"
    selector = with_label_keys(selector_of(c.get("labelSelector")), keys, labels)
    return Constraint(max_skew, key, selector,
                      1 if min_domains is None else min_domains, *policies)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def with_label_keys(selector: Selector, keys: Sequence[str], labels: Labels) -> Selector:
    """`selector` ANDed with `key In (value)` for each key of `keys` that `labels` carry; a
    selector that matches nothing stays so (kube-scheduler's mergeLabelSetWithSelector)."""
    if not keys or selector.requirements is None:
        return selector
    added: list[Requirement] = [(k, "In", frozenset((labels[k],))) for k in keys
                                if isinstance(labels.get(k), str)]
    if not added:
        return selector
    return Selector(tuple(sorted(selector.requirements + tuple(added),
                                 key=lambda r: (r[0], r[1], sorted(r[2])))))


@dataclass(frozen=True)
class SpreadCounts:
    constraints: tuple[Constraint, ...]
    matched: tuple[dict[str, int], ...]  # per constraint: domain (key's value) -> pods
    smallest: tuple[int, ...]  # per constraint: the smallest count of its domains
    self_match: tuple[bool, ...]  # per constraint: the pod matches its selector


def spread_counts(pod: PodFacts, constraints: tuple[Constraint, ...], index: PodIndex,
                  node_labels: Mapping[str, Labels], accepts: Callable[[str], bool],
                  tolerated: Callable[[str], bool]) -> SpreadCounts:
    """`accepts(node)`: the pod's nodeSelector and required node affinity let it in;
    `tolerated(node)`: the pod tolerates the node's NoSchedule and NoExecute taints."""
    keys = [c.topology_key for c in constraints]
    matched: tuple[dict[str, int], ...] = tuple({} for _ in constraints)
    # the nodes each pair of policies includes; most pods have one pair, so one set
    included: dict[tuple[bool, bool], set[str]] = {
        (c.honor_affinity, c.honor_taints): set() for c in constraints}
    for node, labels in node_labels.items():
        if not all(k in labels for k in keys):
            continue
        affinity: bool | None = None  # each asked once a node, whichever pairs need it
        taints: bool | None = None
        for (honor_affinity, honor_taints), nodes in included.items():
            if honor_affinity:
                if affinity is None:
                    affinity = accepts(node)
                if not affinity:
                    continue
            if honor_taints:
                if taints is None:
                    taints = tolerated(node)
                if not taints:
                    continue
            nodes.add(node)
    for c, domains in zip(constraints, matched):
        nodes = included[(c.honor_affinity, c.honor_taints)]
        for node in nodes:
            domains.setdefault(node_labels[node][c.topology_key], 0)
        for share in index.selected(pod.namespace, c.selector):
            other = share.pod
            if share.node not in nodes or other is None or other.terminating:
                continue
            if c.selector.matches(other.labels):
                domains[node_labels[share.node][c.topology_key]] += 1
    return SpreadCounts(constraints, matched,
                        tuple(min(d.values(), default=_NO_MINIMUM) for d in matched),
                        tuple(c.selector.matches(pod.labels) for c in constraints))


def spread_reason(counts: SpreadCounts, labels: Labels) -> str | None:
    for c, domains, smallest, self_match in zip(counts.constraints, counts.matched,
                                                counts.smallest, counts.self_match):
        value = labels.get(c.topology_key)
        if value is None:
            return SPREAD_MISSING_LABEL
        minimum = 0 if len(domains) < c.min_domains else smallest
        if domains.get(value, 0) + self_match - minimum > c.max_skew:
            return SPREAD
    return None
