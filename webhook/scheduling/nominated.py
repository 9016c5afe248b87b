"""The pods a preemption nominated for a node (`status.nominatedNodeName`) that are not bound
yet, indexed by node, and what they take from the node's filters (kube-scheduler's
RunFilterPluginsWithNominatedPods and addGENominatedPods).

A nominated pod of a priority equal to or higher than the pod's, other than the pod itself,
counts on its node as though it ran there (the filters' first pass): its requests, host ports,
inline disks, and its labels and required anti-affinity. The pod must also pass the filters
without them (the second pass: an affinity one of them alone satisfies is no affinity). Its
cards are held on the node too (nominated_fit.py). The index holds what those filters read,
nothing else; a cluster without nominations holds two empty maps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

from ..model.pods import PodRequest
from .pod_affinity import AffinityCounts, Pair, affinity_reason
from .pod_facts import HostPort, PodFacts, disks_conflict
from .resources import NO_DEVICES, Devices, Resources

Labels = Mapping[str, str]
FIELD = "status.nominatedNodeName"


@dataclass(frozen=True, slots=True)
class NominatedPod:
    uid: str
    node: str
    priority: int
    wants: Resources  # what NodeResourcesFit counts of it
    facts: PodFacts  # namespace, labels, host ports, required anti-affinity, inline disks
    devices: Devices = NO_DEVICES  # its requests of the Mthreads resources (allocatable)
    request: PodRequest | None = None  # its cards (None: it asks none, or breaks a rule)
    use: frozenset[str] = frozenset()  # mthreads.ai/use-gpuuuid
    nouse: frozenset[str] = frozenset()  # mthreads.ai/nouse-gpuuuid


class NominatedPods:
    def __init__(self) -> None:
        self.on_node: dict[str, dict[str, NominatedPod]] = {}  # node -> uid -> the pod
        self.node_of: dict[str, str] = {}  # uid -> node

    def put(self, uid: str, pod: NominatedPod | None) -> bool:
        """The pod's nomination now (None: none, or it is bound or gone). True when a node
        may have more room than before (a nomination cleared, moved or changed)."""
        node = self.node_of.get(uid)
        old = self.on_node[node].get(uid) if node is not None else None
        if old == pod:
            return False
        if node is not None:
            on = self.on_node[node]
            del on[uid]
            if not on:
                del self.on_node[node]
            del self.node_of[uid]
        if pod is not None:
            self.on_node.setdefault(pod.node, {})[uid] = pod
            self.node_of[uid] = pod.node
        return old is not None

    def clear(self) -> None:
        self.on_node.clear()
        self.node_of.clear()

    def ahead_of(self, node: str, priority: int, uid: str) -> tuple[NominatedPod, ...]:
        """The pods nominated for `node` that the pod (`priority`, `uid`) yields to: equal or
        higher priority, not itself; highest first."""
        on = self.on_node.get(node)
        if not on:
            return ()
        return tuple(sorted((p for p in on.values() if p.priority >= priority and p.uid != uid),
                            key=lambda p: (-p.priority, p.uid)))


def nominated_node(status: object) -> str | None:
    """The node a pod's status nominates, or None. Not a string: an error naming the field."""
    if not isinstance(status, dict):
        return None
    node = status.get("nominatedNodeName")
    if node is None or node == "":
        return None
    if not isinstance(node, str):
        raise ValueError(f"{FIELD} is not a string: {node!r:.64}")
    return node


# The filters' first pass, on one node, with the pods it yields to there (`ahead`)
def requested_with(requested: Resources, ahead: tuple[NominatedPod, ...]) -> Resources:
    for p in ahead:
        requested = requested + p.wants
    return requested


def ports_of(ahead: tuple[NominatedPod, ...]) -> Counter[HostPort]:
    ports: Counter[HostPort] = Counter()
    for p in ahead:
        ports.update(p.facts.ports)
    return ports


def disks_taken(wanted: tuple[tuple[object, ...], ...], ahead: tuple[NominatedPod, ...]) -> bool:
    return any(disks_conflict(w, m) for p in ahead for m in p.facts.disks for w in wanted)


def affinity_with(counts: AffinityCounts | None, facts: PodFacts,
                  ahead: tuple[NominatedPod, ...], labels: Labels,
                  namespace_labels: Mapping[str, Labels]) -> str | None:
    """InterPodAffinity's answer on the node with the nominated pods counted there (the first
    pass), or None when they change nothing or it passes (the second pass, without them, is
    the caller's). They stand on this node: their pairs are this node's labels. The pod's
    terms are the decision's (`counts`: their namespaceSelectors resolved); a nominated pod's
    anti-affinity reads the pod's namespace's labels (`namespace_labels`)."""
    affinity = counts.affinity if counts is not None else ()
    own_anti = counts.anti_affinity if counts is not None else facts.anti_affinity
    own_namespace = namespace_labels.get(facts.namespace)
    matched: Counter[Pair] = Counter()
    anti: Counter[Pair] = Counter()
    existing: Counter[Pair] = Counter()
    for p in ahead:
        other = p.facts
        if affinity and all(t.selects(other.namespace, other.labels) for t in affinity):
            for t in affinity:
                if t.topology_key in labels:
                    matched[(t.topology_key, labels[t.topology_key])] += 1
        for t in own_anti:
            if t.topology_key in labels and t.selects(other.namespace, other.labels):
                anti[(t.topology_key, labels[t.topology_key])] += 1
        for t in other.anti_affinity:
            if t.topology_key in labels and t.selects(facts.namespace, facts.labels, own_namespace):
                existing[(t.topology_key, labels[t.topology_key])] += 1
    if not (matched or anti or existing):
        return None
    if counts is None:
        counts = AffinityCounts((), facts.anti_affinity, Counter(), Counter(), Counter(), False)
    return affinity_reason(AffinityCounts(
        affinity, counts.anti_affinity, counts.matched_affinity + matched,
        counts.matched_anti_affinity + anti, counts.existing_anti_affinity + existing,
        counts.self_matches), labels)
