"""The pods on the nodes, indexed for the rules that read other pods: by node, by namespace, the
host ports and inline disks in use per node, and the required anti-affinity terms of the pods
already placed (one entry per distinct term: the replicas of a Deployment share one), and by the value of each
label key a selector has asked about (made on the first question, kept up to date from then on:
the pods a selector `app In (web)` picks are found without reading the namespace's other pods,
and keys no selector names cost no memory).

Part of ClusterState (state.py), updated with the shares it counts, assumed ones included, so a
decision sees the pods it placed a moment ago before the watch shows them.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Iterable

from .label_selector import Selector
from .pod_facts import AffinityTerm, HostPort, PodFacts
from .shares import PodShare


class PodIndex:
    def __init__(self) -> None:
        self.on_node: dict[str, dict[str, PodFacts]] = {}  # node -> uid -> facts
        self.in_namespace: dict[str, dict[str, PodShare]] = {}  # ns -> uid -> share (node, pod)
        self.ports: dict[str, Counter[HostPort]] = {}  # node -> host ports in use
        self.disks: dict[str, Counter[tuple[object, ...]]] = {}  # node -> inline disks mounted
        self.anti_affinity: dict[AffinityTerm, Counter[str]] = {}  # term -> node -> pods holding it
        # label key -> (namespace, value) -> uid -> share, for the keys asked about
        self.by_label: dict[str, dict[tuple[str, str], dict[str, PodShare]]] = {}

    def selected(self, namespace: str, selector: Selector) -> Iterable[PodShare]:
        """The pods of `namespace` the selector may match (a superset: the caller matches)."""
        first_in = next((r for r in selector.requirements or () if r[1] == "In"), None)
        if first_in is None:
            return (self.in_namespace.get(namespace) or {}).values()
        key, _, values = first_in
        by_value = self.by_label.get(key)
        if by_value is None:
            by_value = self.by_label[key] = {}
            for ns, pods in self.in_namespace.items():
                for uid, share in pods.items():
                    labels = share.pod.labels if share.pod is not None else {}
                    if key in labels:
                        by_value.setdefault((ns, labels[key]), {})[uid] = share
        return chain.from_iterable((by_value.get((namespace, v)) or {}).values() for v in values)

    def add(self, share: PodShare, facts: PodFacts) -> None:
        """`facts`: the share's `pod`."""
        uid, node = share.uid, share.node
        self.on_node.setdefault(node, {})[uid] = facts
        self.in_namespace.setdefault(facts.namespace, {})[uid] = share
        for key, by_value in self.by_label.items():
            if key in facts.labels:
                by_value.setdefault((facts.namespace, facts.labels[key]), {})[uid] = share
        if facts.ports:
            self.ports.setdefault(node, Counter()).update(facts.ports)
        if facts.disks:
            self.disks.setdefault(node, Counter()).update(facts.disks)
        for term in facts.anti_affinity:
            self.anti_affinity.setdefault(term, Counter())[node] += 1

    def remove(self, share: PodShare, facts: PodFacts) -> None:
        uid, node = share.uid, share.node
        _pop(self.on_node, node, uid)
        _pop(self.in_namespace, facts.namespace, uid)
        for key, by_value in self.by_label.items():
            if key in facts.labels:
                _pop(by_value, (facts.namespace, facts.labels[key]), uid)
        if facts.ports:
            _subtract(self.ports, node, facts.ports)
        if facts.disks:
            _subtract(self.disks, node, facts.disks)
        for term in facts.anti_affinity:
            _subtract(self.anti_affinity, term, (node,))

    def clear(self) -> None:
        for m in (self.on_node, self.in_namespace, self.ports, self.disks, self.anti_affinity,
                  self.by_label):
            m.clear()


def _pop(m: dict, key: object, uid: str) -> None:  # type: ignore[type-arg]
    inner = m.get(key)
    if inner is not None:
        inner.pop(uid, None)
        if not inner:
            del m[key]


def _subtract(m: dict, key: object, items: tuple[object, ...]) -> None:  # type: ignore[type-arg]
    counts = m.get(key)
    if counts is None:
        return
    counts.subtract(items)
    for item in items:
        if counts[item] <= 0:
            del counts[item]
    if not counts:
        del m[key]
