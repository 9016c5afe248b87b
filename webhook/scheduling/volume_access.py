"""kube-scheduler's ReadWriteOncePod rule (VolumeRestrictions, 1.29 GA): a claim whose
accessModes hold ReadWriteOncePod is used by one pod at most, anywhere in the cluster.

As upstream's PreFilter: the pod's persistentVolumeClaim volumes (not its generic ephemeral
ones, whose claim is its own) are looked up; one not found keeps the pod off every node with
`persistentvolumeclaim "<name>" not found` (volumes.pod_volumes says it first, in the same
words); the pods counted are every pod the cache counts on any node, the ones assumed a moment
ago included and the ended ones (Succeeded, Failed: the cache drops them) not. When any such
pod uses one of the pod's ReadWriteOncePod claims, every node refuses it with upstream's
reason (its Filter, at VolumeRestrictions' place in the order).
"""

from __future__ import annotations

from typing import Mapping

from ..base.json_types import JsonObject
from .pod_facts import CLAIM
from .volumes import Storage

READ_WRITE_ONCE_POD = "ReadWriteOncePod"


def once_pod_claim_in_use(disks: tuple[tuple[object, ...], ...], storage: Storage,
                          users: Mapping[tuple[str, str], int]) -> bool:
    """Whether one of the pod's claims (`disks`: its PodFacts.disks) is ReadWriteOncePod and
    used by a pod the cache counts (`users`: PodIndex.claim_users)."""
    for d in disks:
        if d[0] != CLAIM:
            continue
        key = (str(d[1]), str(d[2]))
        if not users.get(key):
            continue
        claim = storage.claims.get(key)
        if claim is not None and READ_WRITE_ONCE_POD in _access_modes(claim):
            return True
    return False


def _access_modes(claim: JsonObject) -> tuple[str, ...]:
    # the API server stores a list of strings; anything else grants no mode
    modes = (claim.get("spec") or {}).get("accessModes")
    return tuple(m for m in modes if isinstance(m, str)) if isinstance(modes, list) else ()
