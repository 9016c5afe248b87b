"""The pods on the nodes, indexed for the rules that read other pods: by node, by namespace, the
host ports and inline disks in use per node, and the required anti-affinity terms of the pods
already placed (one entry per distinct term: the replicas of a Deployment share one), and per
namespace by the value of each label key a selector has asked about there (made on the first
question from that namespace's pods, kept up to date from then on: the pods a selector
`app In (web)` picks are found without reading the namespace's other pods, and keys no selector
names cost no memory). Every entry goes with the last pod it counts: a key no pod of the
namespace carries any more, a namespace without pods (issue 46, finding 6).

Part of ClusterState (state.py), updated with the shares it counts, assumed ones included, so a
decision sees the pods it placed a moment ago before the watch shows them.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Iterable

from .label_selector import Selector
from .pod_facts import CLAIM, AffinityTerm, HostPort, PodFacts
from .shares import PodShare

KEYS_KEPT = 64  # label keys indexed per namespace; a question about another reads the namespace


class PodIndex:
    def __init__(self) -> None:
        self.on_node: dict[str, dict[str, PodFacts]] = {}  # node -> uid -> facts
        self.in_namespace: dict[str, dict[str, PodShare]] = {}  # ns -> uid -> share (node, pod)
        self.ports: dict[str, Counter[HostPort]] = {}  # node -> host ports in use
        # node -> the inline disks mounted and the claims used (PodFacts.disks)
        self.disks: dict[str, Counter[tuple[object, ...]]] = {}
        # (namespace, claim) -> the pods using it, on any node (ReadWriteOncePod: volume_access.py)
        self.claim_users: Counter[tuple[str, str]] = Counter()
        self.anti_affinity: dict[AffinityTerm, Counter[str]] = {}  # term -> node -> pods holding it
        # namespace -> label key -> value -> uid -> share, for the keys asked about there
        self.by_label: dict[str, dict[str, dict[str, dict[str, PodShare]]]] = {}

    def selected(self, namespace: str, selector: Selector) -> Iterable[PodShare]:
        """The pods of `namespace` the selector may match (a superset: the caller matches)."""
        first_in = next((r for r in selector.requirements or () if r[1] == "In"), None)
        if first_in is None:
            return (self.in_namespace.get(namespace) or {}).values()
        key, _, values = first_in
        pods = self.in_namespace.get(namespace)
        if pods is None:
            return ()
        keys = self.by_label.get(namespace)
        by_value = keys.get(key) if keys is not None else None
        if by_value is None:
            by_value = {}
            for uid, share in pods.items():
                labels = share.pod.labels if share.pod is not None else {}
                if key in labels:
                    by_value.setdefault(labels[key], {})[uid] = share
            # kept unless no pod has the key, or the namespace has keys enough
            if by_value and (keys is None or len(keys) < KEYS_KEPT):
                self.by_label.setdefault(namespace, {})[key] = by_value
        return chain.from_iterable((by_value.get(v) or {}).values() for v in values)

    def add(self, share: PodShare, facts: PodFacts) -> None:
        """`facts`: the share's `pod`."""
        uid, node = share.uid, share.node
        self.on_node.setdefault(node, {})[uid] = facts
        self.in_namespace.setdefault(facts.namespace, {})[uid] = share
        keys = self.by_label.get(facts.namespace)
        if keys:
            for key, value in facts.labels.items():
                by_value = keys.get(key)
                if by_value is not None:
                    by_value.setdefault(value, {})[uid] = share
        if facts.ports:
            self.ports.setdefault(node, Counter()).update(facts.ports)
        if facts.disks:
            self.disks.setdefault(node, Counter()).update(facts.disks)
            for d in facts.disks:
                if d[0] == CLAIM:
                    self.claim_users[_claim_key(d)] += 1
        for term in facts.anti_affinity:
            self.anti_affinity.setdefault(term, Counter())[node] += 1

    def remove(self, share: PodShare, facts: PodFacts) -> None:
        uid, node = share.uid, share.node
        _pop(self.on_node, node, uid)
        _pop(self.in_namespace, facts.namespace, uid)
        keys = self.by_label.get(facts.namespace)
        if keys:
            for key, value in facts.labels.items():
                by_value = keys.get(key)
                if by_value is not None:
                    _pop(by_value, value, uid)
                    if not by_value:
                        del keys[key]
            if not keys or facts.namespace not in self.in_namespace:
                del self.by_label[facts.namespace]
        if facts.ports:
            _subtract(self.ports, node, facts.ports)
        if facts.disks:
            _subtract(self.disks, node, facts.disks)
            for d in facts.disks:
                if d[0] == CLAIM:
                    claim = _claim_key(d)
                    self.claim_users[claim] -= 1
                    if self.claim_users[claim] <= 0:
                        del self.claim_users[claim]
        for term in facts.anti_affinity:
            _subtract(self.anti_affinity, term, (node,))

    def clear(self) -> None:
        for m in (self.on_node, self.in_namespace, self.ports, self.disks, self.anti_affinity,
                  self.by_label, self.claim_users):
            m.clear()


def _claim_key(disk: tuple[object, ...]) -> tuple[str, str]:
    """(namespace, name) of a claim of PodFacts.disks."""
    return str(disk[1]), str(disk[2])


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
