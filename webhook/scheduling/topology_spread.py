"""kube-scheduler 1.20's PodTopologySpread filter, for the `DoNotSchedule` constraints.

Per decision (PreFilter): the topology pairs (key, value) of the nodes the pod's nodeSelector and
required node affinity accept and that carry every constraint's key, each with the number of
the pod's namespace's pods, not terminating, that the constraint's selector matches, counted on
every node with that pair; and per key the smallest count. Per node (Filter): a node without a
key is refused; else the count of its pair, plus one if the pod matches the selector itself,
minus the smallest, may not exceed maxSkew.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

from ..base.json_types import JsonObject
from .label_selector import Selector, selector_of
from .pod_facts import PodFacts
from .pod_index import PodIndex
from .reasons import SPREAD, SPREAD_MISSING_LABEL

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: Selector


def constraints_of(pod: JsonObject) -> tuple[Constraint, ...]:
    out = []
    for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or ():
        if c.get("whenUnsatisfiable") == "DoNotSchedule":
            out.append(Constraint(int(c.get("maxSkew") or 0), c.get("topologyKey") or "",
                                  selector_of(c.get("labelSelector"))))
    return tuple(out)


@dataclass(frozen=True)
class SpreadCounts:
    constraints: tuple[Constraint, ...]
    matched: Counter[tuple[str, str]]  # pair -> pods; every eligible pair is present
    smallest: dict[str, int]  # topology key -> the smallest count of its eligible pairs
    self_match: tuple[bool, ...]  # per constraint: the pod matches its selector


def spread_counts(pod: PodFacts, constraints: tuple[Constraint, ...], index: PodIndex,
                  node_labels: Mapping[str, Labels],
                  accepts: Callable[[str], bool]) -> SpreadCounts:
    """`accepts(node)`: the pod's nodeSelector and required node affinity let it in."""
    keys = [c.topology_key for c in constraints]
    eligible: set[tuple[str, str]] = set()
    for node, labels in node_labels.items():
        if all(k in labels for k in keys) and accepts(node):
            eligible.update((k, labels[k]) for k in keys)
    matched: Counter[tuple[str, str]] = Counter({pair: 0 for pair in eligible})
    for c in constraints:
        for share in index.selected(pod.namespace, c.selector):
            on, other = node_labels.get(share.node), share.pod
            if on is None or other is None or other.terminating:
                continue
            pair = (c.topology_key, on.get(c.topology_key, ""))
            if pair in eligible and c.selector.matches(other.labels):
                matched[pair] += 1
    smallest: dict[str, int] = {}
    for (key, _), n in matched.items():
        smallest[key] = min(n, smallest.get(key, n))
    return SpreadCounts(constraints, matched, smallest,
                        tuple(c.selector.matches(pod.labels) for c in constraints))


def spread_reason(counts: SpreadCounts, labels: Labels) -> str | None:
    for c, self_match in zip(counts.constraints, counts.self_match):
        value = labels.get(c.topology_key)
        if value is None:
            return SPREAD_MISSING_LABEL
        if c.topology_key not in counts.smallest:
            continue
        skew = counts.matched.get((c.topology_key, value), 0) + self_match - counts.smallest[c.topology_key]
        if skew > c.max_skew:
            return SPREAD
    return None
