"""Which nodes a pod may go to, apart from the cards: kube-scheduler 1.20's filters, in its
order, each node's reason the first that fails.

    the node's own rules   NodeUnschedulable, TaintToleration, NodeAffinity (+ Ready: ours)
    NodePorts              host ports in use
    NodeResourcesFit       pods; cpu, memory, ephemeral storage, every other resource the pod
                           requests (sidecars, pod-level resources: effective_requests.py)
    VolumeRestrictions     inline disks only one node may mount read-write; ReadWriteOncePod
                           claims another pod uses (volume_access.py)
    NodeVolumeLimits       CSI drivers' attach limits (csi_limits.py)
    VolumeBinding          claims: bound volumes' node affinity (volumes.py)
    VolumeZone             claims: bound volumes' zone and region labels
    PodTopologySpread      DoNotSchedule constraints
    InterPodAffinity       required affinity, anti-affinity, existing pods' anti-affinity

What every node's check shares is read once per decision (`node_checks`, kube-scheduler's
PreFilter); a reason that holds for every node (a claim not found) is `NodeChecks.refusal`.
So is a pod whose node rules would cost more than `NODE_RULES_BUDGET` checks over the nodes
(issue 46): the cap on the work a decision does under the cache's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..base.json_types import JsonObject
from . import reasons
from .csi_limits import attachable, csi_limits_reason
from .effective_requests import requests_problem
from .node_fit import NodeRules, node_rules_of, resources_reason, untolerated_taint
from .nominated import affinity_with, disks_taken, ports_of, requested_with
from .pod_affinity import AffinityCounts, affinity_counts, affinity_reason
from .pod_facts import (
    ANY_IP,
    INLINE_DISKS,
    HostPort,
    PodFacts,
    affinity_terms,
    disks_conflict,
    facts_of,
)
from .priority import pod_priority
from .resource_claims import claims_refusal
from .resources import Resources, pod_requests
from .state import ClusterState, NodeInfo
from .topology_spread import SpreadCounts, constraints_of, spread_counts, spread_reason
from .volume_access import once_pod_claim_in_use
from .volumes import NO_VOLUMES, PodVolumes, pod_volumes, volumes_reason


@dataclass(frozen=True)
class NodeChecks:
    rules: NodeRules
    wants: Resources
    facts: PodFacts
    volumes: PodVolumes = NO_VOLUMES
    spread: SpreadCounts | None = None
    affinity: AffinityCounts | None = None
    refusal: str | None = None  # every node's reason
    priority: int = 0  # the pod's, and its uid: which nominated pods it yields to (nominated.py)
    uid: str = ""
    once_pod_conflict: bool = False  # a ReadWriteOncePod claim of the pod is in use
    attachable: tuple[tuple[object, ...], ...] = ()  # its volumes NodeVolumeLimits counts

    def reason(self, info: NodeInfo, state: ClusterState) -> str | None:
        """The first of the filters that refuses the node, or None."""
        if self.refusal is not None:
            return self.refusal
        reason = self.rules.reason(info.obj)
        if reason is not None:
            return reason
        # The pods nominated here that this one yields to count as running there (the first
        # pass); each filter fails if it fails with them (or, then, without: the second).
        ahead = state.nominated.ahead_of(info.name, self.priority, self.uid) \
            if state.nominated.on_node else ()
        if self.facts.ports and (_ports_taken(self.facts.ports, state.pods.ports.get(info.name))
                                 or (ahead and _ports_taken(self.facts.ports, ports_of(ahead)))):
            return reasons.PORTS_IN_USE
        requested = state.requested_on(info.name)
        reason = resources_reason(self.wants, info.allocatable,
                                  requested_with(requested, ahead) if ahead else requested,
                                  state.names)
        if reason is not None:
            return reason
        if self.facts.disks and (_disks_taken(self.facts.disks, state.pods.disks.get(info.name))
                                 or (ahead and disks_taken(self.facts.disks, ahead))):
            return reasons.DISK_CONFLICT
        if self.once_pod_conflict:
            return reasons.RWOP_CONFLICT
        if self.attachable and (reason := csi_limits_reason(
                self.attachable, info.obj, state.pods.disks.get(info.name) or (), state.storage)):
            return reason
        if not self.volumes.none and (reason := volumes_reason(self.volumes, info.obj)):
            return reason
        labels = state.labels.get(info.name) or {}
        if self.spread is not None and (reason := spread_reason(self.spread, labels)):
            return reason
        if ahead and (reason := affinity_with(self.affinity, self.facts, ahead, labels,
                                              state.namespaces)):
            return reason
        if self.affinity is not None:
            return affinity_reason(self.affinity, labels)
        return None


# Node rules (tolerations, nodeSelector entries, node affinity terms: NodeRules.cost) times
# nodes that one decision may check: 5,000 nodes at 100 each (an ordinary pod has a few). Each
# check reads at most the node's few taints or labels; the time this bounds a decision's hold
# of the cache's lock to is in docs/allocator.md ("How long a decision holds the lock").
NODE_RULES_BUDGET = 500_000


def node_checks(pod: JsonObject, state: ClusterState, binder: bool = False,
                wants: Resources | None = None, rules: NodeRules | None = None) -> NodeChecks:
    """`binder`: kube-scheduler's volume binder places the pod's WaitForFirstConsumer claims
    (volumes.pod_volumes). `wants`: the pod's requests when the caller has them (PodAsk.wants);
    `rules`: its node rules, when read before (cycle_state.py)."""
    facts = facts_of(pod)
    rules = rules if rules is not None else node_rules_of(pod.get("spec") or {})
    wants = wants if wants is not None else pod_requests(pod)
    if rules.cost * len(state.nodes) > NODE_RULES_BUDGET:
        return NodeChecks(rules, wants, facts, refusal=reasons.TOO_MANY_NODE_RULES)
    if not binder and (refusal := claims_refusal(pod.get("spec") or {})):
        return NodeChecks(rules, wants, facts, refusal=refusal)
    problem = requests_problem(pod)  # a field its requests are read from of the wrong shape
    if problem is not None:
        return NodeChecks(rules, wants, facts, refusal=problem)
    volumes = pod_volumes(pod, state.storage, binder)
    if isinstance(volumes, str):
        return NodeChecks(rules, wants, facts, refusal=volumes)
    spread = None
    constraints = constraints_of(pod)
    if isinstance(constraints, str):
        return NodeChecks(rules, wants, facts, refusal=constraints)
    if constraints:
        selection, tolerations = rules.selection, rules.tolerations

        def accepts(node: str) -> bool:
            return selection.matches(state.nodes[node].obj)

        def tolerated(node: str) -> bool:
            return untolerated_taint(state.nodes[node].obj, tolerations) is None
        spread = spread_counts(facts, constraints, state.pods, state.labels, accepts, tolerated)
    affinity = affinity_counts(facts, affinity_terms(pod, "podAffinity"), state.pods, state.labels,
                               state.namespaces)
    uid = (pod.get("metadata") or {}).get("uid")
    return NodeChecks(rules, wants, facts, volumes, spread, None if affinity.idle else affinity,
                      priority=pod_priority(pod), uid=uid if isinstance(uid, str) else "",
                      once_pod_conflict=bool(facts.disks) and once_pod_claim_in_use(
                          facts.disks, state.storage, state.pods.claim_users),
                      attachable=attachable(facts.disks))


def node_reasons(pod: JsonObject, state: ClusterState) -> dict[str, str | None]:
    """Every node's answer for the pod: None when the filters let it in, else the reason."""
    checks = node_checks(pod, state)
    return {name: checks.reason(info, state) for name, info in state.nodes.items()}


def _ports_taken(wanted: tuple[HostPort, ...], used: Mapping[HostPort, int] | None) -> bool:
    if not used:
        return False
    for ip, protocol, port in wanted:
        if ip == ANY_IP:  # every address of the node: any use of the port conflicts
            if any(p == port and proto == protocol for _, proto, p in used):
                return True
        elif (ANY_IP, protocol, port) in used or (ip, protocol, port) in used:
            return True
    return False


def _disks_taken(wanted: tuple[tuple[object, ...], ...],
                 mounted: Mapping[tuple[object, ...], int] | None) -> bool:
    if not mounted:
        return False
    disks = [w for w in wanted if w[0] in INLINE_DISKS]  # claims conflict so with nothing
    return bool(disks) and any(disks_conflict(w, m) for w in disks for m in mounted)
