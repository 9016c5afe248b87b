"""kube-scheduler 1.20's InterPodAffinity filter: the pod's required affinity and anti-affinity,
and the required anti-affinity of the pods already placed, counted once per decision by
topology pair (label key, value) and then checked per node against the node's labels.

kube-scheduler's particulars kept here: a pod counts for the affinity terms only when it matches
all of them; a pod whose affinity finds no pod anywhere may still go where the topology keys
exist if it matches its own terms (the first pod of a group); a node without a term's topology
key fails an affinity term but not an anti-affinity term.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from .pod_facts import AffinityTerm, PodFacts, written_terms
from .pod_index import PodIndex
from .reasons import AFFINITY_RULES, ANTI_AFFINITY_RULES, EXISTING_ANTI_AFFINITY

Pair = tuple[str, str]  # (topology key, value)
Labels = Mapping[str, str]


@dataclass(frozen=True)
class AffinityCounts:
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    matched_affinity: Counter[Pair]
    matched_anti_affinity: Counter[Pair]
    existing_anti_affinity: Counter[Pair]
    self_matches: bool  # the pod matches all its own affinity terms

    @property
    def idle(self) -> bool:
        return not (self.affinity or self.anti_affinity or self.existing_anti_affinity)


def resolved(term: AffinityTerm, namespace_labels: Mapping[str, Labels]) -> AffinityTerm:
    """The incoming pod's term with the namespaces its namespaceSelector matches added to its
    list (the term itself when it has no selector, or `{}`: every namespace)."""
    chosen = term.namespace_selector
    if chosen is None or chosen.requirements == ():  # () is `{}`; None, an unreadable one
        return term
    matched = [ns for ns, labels in namespace_labels.items() if chosen.matches(labels)]
    return AffinityTerm(term.namespaces.union(matched), term.selector, term.topology_key)


def term_namespaces(term: AffinityTerm, index: PodIndex) -> Iterable[str]:
    """The namespaces whose pods a resolved term may select."""
    if term.namespace_selector is not None:  # `{}`: every namespace with pods
        return list(index.in_namespace)
    return term.namespaces


def affinity_counts(pod: PodFacts, affinity: tuple[AffinityTerm, ...], index: PodIndex,
                    node_labels: Mapping[str, Labels],
                    namespace_labels: Mapping[str, Labels] | None = None) -> AffinityCounts:
    """The counts of a decision (PreFilter). `node_labels`: the labels of each node known;
    `namespace_labels`: of each namespace known (their namespaceSelectors read them)."""
    namespace_labels = namespace_labels if namespace_labels is not None else {}
    own_labels = namespace_labels.get(pod.namespace)
    existing: Counter[Pair] = Counter()
    for term, nodes in index.anti_affinity.items():
        if term.selects(pod.namespace, pod.labels, own_labels):
            for node, n in nodes.items():
                labels = node_labels.get(node)
                if labels is not None and term.topology_key in labels:
                    existing[(term.topology_key, labels[term.topology_key])] += n
    if any(t.namespace_selector is not None for t in affinity):
        affinity = tuple(resolved(t, namespace_labels) for t in affinity)
    anti = pod.anti_affinity
    if any(t.namespace_selector is not None for t in anti):
        anti = tuple(resolved(t, namespace_labels) for t in anti)
    matched_affinity: Counter[Pair] = Counter()
    matched_anti: Counter[Pair] = Counter()
    if affinity:  # a pod counts when it matches every term: the first term's pods are the candidates
        first = affinity[0]
        for ns in term_namespaces(first, index):
            for share in index.selected(ns, first.selector):
                labels, other = node_labels.get(share.node), share.pod
                if labels is not None and other is not None and \
                        all(t.selects(other.namespace, other.labels) for t in affinity):
                    for t in affinity:
                        if t.topology_key in labels:
                            matched_affinity[(t.topology_key, labels[t.topology_key])] += 1
    for t in anti:
        for ns in term_namespaces(t, index):
            for share in index.selected(ns, t.selector):
                labels, other = node_labels.get(share.node), share.pod
                if labels is not None and other is not None and t.topology_key in labels and \
                        t.selector.matches(other.labels):
                    matched_anti[(t.topology_key, labels[t.topology_key])] += 1
    self_matches = bool(affinity) and all(t.selects(pod.namespace, pod.labels) for t in affinity)
    return AffinityCounts(affinity, anti, matched_affinity, matched_anti, existing, self_matches)


def affinity_reason(counts: AffinityCounts, labels: Labels) -> str | None:
    """The node's answer (Filter): None when the pod may go there."""
    if counts.affinity:
        found = True
        for t in counts.affinity:
            value = labels.get(t.topology_key)
            if value is None:
                return AFFINITY_RULES
            if counts.matched_affinity[(t.topology_key, value)] <= 0:
                found = False
        if not found and not (not counts.matched_affinity and counts.self_matches):
            return AFFINITY_RULES
    for t in counts.anti_affinity:
        value = labels.get(t.topology_key)
        if value is not None and counts.matched_anti_affinity[(t.topology_key, value)] > 0:
            return ANTI_AFFINITY_RULES
    for (key, value), n in counts.existing_anti_affinity.items():
        if n > 0 and labels.get(key) == value:
            return EXISTING_ANTI_AFFINITY
    return None


def names_namespace_selector(pod: object) -> bool:
    """Whether a required (anti-)affinity term of the pod has a namespaceSelector: only then
    do the namespaces' labels change its answer, or another pod's (`cards` lists them then)."""
    return any(t.get("namespaceSelector") is not None for t in written_terms(pod))
