"""Which nodes a pod may go to, apart from the cards: kube-scheduler 1.20's filters, in its
order, each node's reason the first that fails.

    the node's own rules   NodeUnschedulable, TaintToleration, NodeAffinity (+ Ready: ours)
    NodePorts              host ports in use
    NodeResourcesFit       pods, cpu, memory, ephemeral storage, every other resource requested
    VolumeRestrictions     inline disks only one node may mount read-write
    VolumeBinding          claims: bound volumes' node affinity (volumes.py)
    VolumeZone             claims: bound volumes' zone and region labels
    PodTopologySpread      DoNotSchedule constraints
    InterPodAffinity       required affinity, anti-affinity, existing pods' anti-affinity

What every node's check shares is read once per decision (`node_checks`, kube-scheduler's
PreFilter); a reason that holds for every node (a claim not found) is `NodeChecks.refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..json_types import JsonObject
from . import reasons
from .node_fit import matches_selector_and_affinity, node_rules_reason, resources_reason
from .pod_affinity import AffinityCounts, affinity_counts, affinity_reason
from .pod_facts import ANY_IP, HostPort, PodFacts, affinity_terms, disks_conflict, facts_of
from .resources import Resources, pod_requests
from .state import ClusterState, NodeInfo
from .topology_spread import SpreadCounts, constraints_of, spread_counts, spread_reason
from .volumes import NO_VOLUMES, PodVolumes, pod_volumes, volumes_reason


@dataclass(frozen=True)
class NodeChecks:
    spec: JsonObject
    wants: Resources
    facts: PodFacts
    volumes: PodVolumes = NO_VOLUMES
    spread: SpreadCounts | None = None
    affinity: AffinityCounts | None = None
    refusal: str | None = None  # every node's reason

    def reason(self, info: NodeInfo, state: ClusterState) -> str | None:
        """The first of the filters that refuses the node, or None."""
        if self.refusal is not None:
            return self.refusal
        reason = node_rules_reason(self.spec, info.obj)
        if reason is not None:
            return reason
        if self.facts.ports and _ports_taken(self.facts.ports, state.pods.ports.get(info.name)):
            return reasons.PORTS_IN_USE
        reason = resources_reason(self.wants, info.allocatable, state.requested_on(info.name),
                                  state.names)
        if reason is not None:
            return reason
        if self.facts.disks and _disks_taken(self.facts.disks, state.pods.disks.get(info.name)):
            return reasons.DISK_CONFLICT
        if not self.volumes.none and (reason := volumes_reason(self.volumes, info.obj)):
            return reason
        labels = state.labels.get(info.name) or {}
        if self.spread is not None and (reason := spread_reason(self.spread, labels)):
            return reason
        if self.affinity is not None:
            return affinity_reason(self.affinity, labels)
        return None


def node_checks(pod: JsonObject, state: ClusterState, binder: bool = False,
                wants: Resources | None = None) -> NodeChecks:
    """`binder`: kube-scheduler's volume binder places the pod's WaitForFirstConsumer claims
    (volumes.pod_volumes). `wants`: the pod's requests when the caller has them (PodAsk.wants)."""
    spec, facts = pod.get("spec") or {}, facts_of(pod)
    wants = wants if wants is not None else pod_requests(pod)
    volumes = pod_volumes(pod, state.storage, binder)
    if isinstance(volumes, str):
        return NodeChecks(spec, wants, facts, refusal=volumes)
    spread = None
    constraints = constraints_of(pod)
    if constraints:
        def accepts(node: str) -> bool:
            return matches_selector_and_affinity(spec, state.nodes[node].obj)
        spread = spread_counts(facts, constraints, state.pods, state.labels, accepts)
    affinity = affinity_counts(facts, affinity_terms(pod, "podAffinity"), state.pods, state.labels)
    return NodeChecks(spec, wants, facts, volumes, spread, None if affinity.idle else affinity)


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
    return bool(mounted) and any(disks_conflict(w, m) for w in wanted for m in mounted or ())
