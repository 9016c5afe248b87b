"""Why a node cannot take a pod: a small fixed set of reason strings, counted like kube-scheduler.

Node-level reasons use kube-scheduler's wording so that people reading `kubectl describe pod`
see what they know; card-level reasons use HAMi's names.
"""

from __future__ import annotations

from collections import Counter

# Node-level (the node cannot run the pod at all).
NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
TAINTED = "node(s) had untolerated taint"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT_EPHEMERAL_STORAGE = "Insufficient ephemeral-storage"
PORTS_IN_USE = "node(s) didn't have free ports for the requested pod ports"
DISK_CONFLICT = "node(s) had no available disk"
AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = SPREAD + " (missing required label)"
# A pod's claims (volumes.py): the first four hold for every node
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
PV_NOT_EXIST = "pvc(s) bound to non-existent pv(s)"
DELAYED_BINDING = ("pod has unbound WaitForFirstConsumer PersistentVolumeClaims, which the "
                   "allocator does not provision (mode=extender places them)")
VOLUME_NODE_CONFLICT = "node(s) had volume node affinity conflict"
VOLUME_ZONE_CONFLICT = "node(s) had no available volume zone"
# VolumeRestrictions (1.29 GA): a ReadWriteOncePod claim another pod uses (volume_access.py)
RWOP_CONFLICT = ("node has pod using PersistentVolumeClaim with the same name and "
                 "ReadWriteOncePod access mode")
# NodeVolumeLimits: a CSI driver's attach limit on the node (csi_limits.py)
MAX_VOLUME_COUNT = "node(s) exceed max volume count"
# Every node's, before any is read: the pod's node rules times the nodes pass the decision's
# budget (feasible.NODE_RULES_BUDGET)
TOO_MANY_NODE_RULES = ("pod has more tolerations, nodeSelector entries and node affinity terms "
                       "than a decision checks on this many nodes")


def insufficient(resource: str) -> str:
    """kube-scheduler's words for a request beyond allocatable: `Insufficient mthreads.com/vgpu`."""
    return f"Insufficient {resource}"


# Card-level (the node runs the pod but none of its cards can serve it).
NO_DEVICE = "NodeInsufficientDevice"  # no Mthreads cards, or fewer than the pod asks for
INCONSISTENT = "NodeCardsInconsistent"  # status.capacity cannot be read as cards
TYPE_MISMATCH = "CardTypeMismatch"  # no card of a model the request is valid for
UUID_MISMATCH = "CardUuidMismatch"  # use-gpuuuid / nouse-gpuuuid left no card
CORDONED = "CardCordoned"  # named in the node's hami.io/device-cordon: takes nothing new
EXCLUSIVE_CONFLICT = "ExclusiveDeviceAllocateConflict"  # card held whole, or whole card asked of a busy one
TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"  # the card holds its limit of containers
CORES_EXHAUSTED = "CardComputeUnitsExhausted"  # a slice without cores on a card whose cores are all reserved
INSUFFICIENT_CARD_MEMORY = "CardInsufficientMemory"
INSUFFICIENT_CARD_CORES = "CardInsufficientCore"

# Every node or card reason, for the pending pods' metrics (metrics/pending_metrics.py).
ALL = (NOT_READY, UNSCHEDULABLE, TAINTED, AFFINITY, INSUFFICIENT_CPU, INSUFFICIENT_MEMORY,
       TOO_MANY_PODS, INSUFFICIENT_EPHEMERAL_STORAGE, PORTS_IN_USE, DISK_CONFLICT, AFFINITY_RULES,
       ANTI_AFFINITY_RULES, EXISTING_ANTI_AFFINITY, SPREAD, SPREAD_MISSING_LABEL, UNBOUND_IMMEDIATE,
       PV_NOT_EXIST, DELAYED_BINDING, VOLUME_NODE_CONFLICT, VOLUME_ZONE_CONFLICT, TOO_MANY_NODE_RULES,
       NO_DEVICE, INCONSISTENT, TYPE_MISMATCH, UUID_MISMATCH, CORDONED,
       EXCLUSIVE_CONFLICT, TIME_SLICING_EXHAUSTED, CORES_EXHAUSTED, INSUFFICIENT_CARD_MEMORY,
       INSUFFICIENT_CARD_CORES,
       RWOP_CONFLICT, MAX_VOLUME_COUNT)

# Not about a node: the pod itself breaks the admission rules (created while the webhook was down).
INVALID_REQUEST = "InvalidRequest"


NAMED_AT_MOST = 3  # nodes named after a reason; the rest are counted


def summary(total_nodes: int, rejected: Counter[str], named: dict[str, list[str]] | None = None) -> str:
    """`0/3 nodes are available: 2 CardInsufficientMemory, 1 node(s) were unschedulable.`

    Most frequent reason first, then alphabetical, so the message is stable. `named`: for a
    reason an operator must act on (a node whose capacity cannot be read), the nodes and why:
    `1 NodeCardsInconsistent (n3: mthreads.com/sgpu-core=40 is not a multiple of 16)`.
    """
    if not rejected:
        return f"0/{total_nodes} nodes are available."
    parts = []
    for reason, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
        which = sorted((named or {}).get(reason) or ())
        if which:
            more = len(which) - NAMED_AT_MOST
            which = which[:NAMED_AT_MOST] + ([f"{more} more"] if more > 0 else [])
            reason = f"{reason} ({'; '.join(which)})"
        parts.append(f"{n} {reason}")
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."


def inconsistent(node: str, problem: str) -> str:
    """The one reason of a node whose capacity cannot be read as cards, naming it (the extender
    answers per node; kube-scheduler counts the reasons as they are)."""
    return f"{INCONSISTENT} ({node}: {problem})"
