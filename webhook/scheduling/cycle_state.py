"""What one decision reads of its pod, read before any node is (kube-scheduler's CycleState,
filled by its PreFilter): what the pod asks, its policies, and its node rules with their sets.
A front-end builds it before it takes the cache's lock (`cycle_of` reads the pod alone), so the
lock is held for the work per node only; the node checks of the decision (feasible.node_checks)
take its rules.

A pod's node rules are kept while it waits, as request.py keeps its ask: a pending pod is
decided again and again (the allocator's backoff, kube-scheduler's retries) and the sets of a
long affinity cost more to make than to read (issue 46: 200 lists of 1,000 hostnames, some
35 ms a making). `forget(uid)`, when the cache sees the pod bound or gone, drops both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..model.config import Config
from .node_fit import NodeRules, node_rules_of
from .request import PodAsk
from .request import forget as forget_ask
from .score import policies


@dataclass(frozen=True, slots=True)
class CycleState:
    pod: JsonObject
    ask: PodAsk
    node_policy: str
    gpu_policy: str
    rules: NodeRules  # the pod's side of the node's own rules


def cycle_of(pod: JsonObject, ask: PodAsk, config: Config) -> CycleState:
    node_policy, gpu_policy = policies(pod, config)
    return CycleState(pod, ask, node_policy, gpu_policy, rules_of(pod))


RULES_KEPT = 10_000  # pods; past it the table starts over
_RULES: dict[str, tuple[JsonObject, NodeRules]] = {}  # uid -> (the spec read, its rules)


def rules_of(pod: JsonObject) -> NodeRules:
    """The pod's node rules, read once for its spec (a pod updated is a new spec object: the
    one kept is held, so its id stays its own)."""
    spec = pod.get("spec") or {}
    uid = (pod.get("metadata") or {}).get("uid")
    if not isinstance(uid, str) or not uid:
        return node_rules_of(spec)
    kept = _RULES.get(uid)
    if kept is not None and kept[0] is spec:
        return kept[1]
    if len(_RULES) >= RULES_KEPT:
        _RULES.clear()
    rules = node_rules_of(spec)
    _RULES[uid] = (spec, rules)
    return rules


def forget(uid: str) -> None:
    """The pod waits no more (bound or gone): what was kept for its decisions goes."""
    _RULES.pop(uid, None)
    forget_ask(uid)
