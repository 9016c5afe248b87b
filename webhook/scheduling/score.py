"""Policies: which node, and which card on it (SPEC 4).

Node `binpack` (default) fills the busiest node that fits, keeping other nodes idle for
whole-card pods; `spread` picks the least used. Cards: `spread` (default) picks the least
used card of the node, `binpack` the busiest.
"""

from __future__ import annotations

from ..base.json_types import JsonObject
from ..model import annotations as keys
from ..model.config import POLICIES, Config
from ..model.pods import Kind
from .state import ClusterState, NodeInfo


def policies(pod: JsonObject, config: Config) -> tuple[str, str]:
    """(node policy, card policy): the pod's annotations, else the config's defaults."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    node = ann.get(keys.NODE_POLICY)
    gpu = ann.get(keys.GPU_POLICY)
    return (node if node in POLICIES else config.allocator.node_policy,
            gpu if gpu in POLICIES else config.allocator.gpu_policy)


def node_used(info: NodeInfo, state: ClusterState, kind: Kind) -> float:
    """How busy a node is, 0..1: its cards for an Mthreads pod, cpu and memory for others."""
    if kind is not Kind.NONE and info.cards.cards:
        return state.room[info.name].used  # kept up to date by the state on every change
    alloc, used = info.allocatable, state.requested_on(info.name)
    parts = [used.cpu_milli / alloc.cpu_milli if alloc.cpu_milli else 0.0,
             used.memory_bytes / alloc.memory_bytes if alloc.memory_bytes else 0.0]
    return sum(parts) / 2


def best_node(candidates: list[NodeInfo], state: ClusterState, kind: Kind, policy: str) -> NodeInfo:
    sign = -1 if policy == "binpack" else 1
    return min(candidates, key=lambda n: (sign * node_used(n, state, kind), n.name))
