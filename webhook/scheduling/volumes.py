"""Whether a pod's volumes can follow it to a node: kube-scheduler 1.20's VolumeBinding and
VolumeZone for claims, with their reasons.

A claim is bound when it names its volume and carries the binder's bind-completed annotation.
A bound claim's volume must accept the node (its nodeAffinity; its zone and region labels). A
missing claim, one being deleted, or an unbound claim of an Immediate class (the PV controller
binds it, not a scheduler) keeps the pod off every node. An unbound claim of a
WaitForFirstConsumer class waits for a scheduler to choose its node and a provisioner to follow:
that is kube-scheduler's volume binder, which the allocator does not run, so it keeps such a pod
off every node with a reason that says so (docs/allocator.md); mode=extender places it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from ..base.json_types import JsonObject
from .node_fit import term_matches
from .reasons import (
    DELAYED_BINDING,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
    VOLUME_NODE_CONFLICT,
    VOLUME_ZONE_CONFLICT,
)

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
ZONE_LABELS = frozenset(("failure-domain.beta.kubernetes.io/zone",
                         "failure-domain.beta.kubernetes.io/region",
                         "topology.kubernetes.io/zone", "topology.kubernetes.io/region"))
ZONES_DELIMITER = "__"



class Storage:
    """The claims, volumes, classes and CSINodes as the watches show them."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], JsonObject] = {}
        self.volumes: dict[str, JsonObject] = {}
        self.classes: dict[str, JsonObject] = {}
        self.csinodes: dict[str, JsonObject] = {}  # by node name: its CSI drivers' attach limits
        # csi_limits' reading of each claim (its driver and volume), until any of these changes
        self.attached_as: dict[tuple[object, ...], tuple[str, str] | None] = {}

    def apply(self, kind: str, event: str, obj: JsonObject | list[JsonObject]) -> None:
        """An informer's event of kind "pvc", "pv", "storageclass" or "csinode"."""
        store = cast("dict[object, JsonObject]",
                     {"pvc": self.claims, "pv": self.volumes, "storageclass": self.classes,
                      "csinode": self.csinodes}[kind])
        key = _claim_key if kind == "pvc" else _name
        self.attached_as.clear()
        if event == "RESET":
            store.clear()
            store.update((key(o), o) for o in cast("list[JsonObject]", obj))
        elif event == "DELETED":
            store.pop(key(cast(JsonObject, obj)), None)
        else:
            store[key(cast(JsonObject, obj))] = cast(JsonObject, obj)


def _name(obj: JsonObject) -> str:
    return cast(str, obj["metadata"]["name"])


def _claim_key(obj: JsonObject) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@dataclass(frozen=True)
class PodVolumes:
    """A pod's claims as every node's check reads them."""

    bound: tuple[JsonObject | None, ...] = ()  # the volume of each bound claim (None: not found)
    zoned: tuple[JsonObject | None, ...] = ()  # VolumeZone's: volumes of claims naming one

    @property
    def none(self) -> bool:
        return not self.bound and not self.zoned


NO_VOLUMES = PodVolumes()


def claim_names(pod: JsonObject) -> list[tuple[str, bool]]:
    """(claim name, whether it is a generic ephemeral volume's) of each of the pod's claims."""
    meta, out = pod.get("metadata") or {}, []
    for v in (pod.get("spec") or {}).get("volumes") or ():
        if (c := v.get("persistentVolumeClaim")) is not None:
            out.append((c.get("claimName") or "", False))
        elif v.get("ephemeral") is not None:
            out.append((f"{meta.get('name', '')}-{v.get('name', '')}", True))
    return out


def class_of(claim: JsonObject) -> str:
    ann = claim["metadata"].get("annotations") or {}
    if BETA_CLASS in ann:
        return cast(str, ann[BETA_CLASS])
    return cast(str, (claim.get("spec") or {}).get("storageClassName") or "")


def _delayed(claim: JsonObject, storage: Storage) -> bool:
    cls = storage.classes.get(class_of(claim))
    return cls is not None and cls.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER


def pod_volumes(pod: JsonObject, storage: Storage, binder: bool = False) -> PodVolumes | str:
    """The pod's volumes, or the reason no node can take it (VolumeBinding's PreFilter).
    `binder`: a volume binder follows the decision (kube-scheduler's, in extender mode), so an
    unbound WaitForFirstConsumer claim is its to place, not a refusal."""
    names = claim_names(pod)
    if not names:
        return NO_VOLUMES
    meta = pod.get("metadata") or {}
    ns, uid = meta.get("namespace", ""), meta.get("uid")
    claims = []
    for name, ephemeral in names:
        claim = storage.claims.get((ns, name))
        if claim is None:
            return f'persistentvolumeclaim "{name}" not found'
        if claim["metadata"].get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted'
        if ephemeral and not any(o.get("controller") and o.get("uid") == uid
                                 for o in claim["metadata"].get("ownerReferences") or ()):
            return f'persistentvolumeclaim "{name}" was not created for the pod'
        claims.append((claim, ephemeral))
    bound, delayed, zoned = [], False, []
    for claim, ephemeral in claims:
        volume_name = (claim.get("spec") or {}).get("volumeName") or ""
        completed = BIND_COMPLETED in (claim["metadata"].get("annotations") or {})
        if volume_name and completed:
            bound.append(storage.volumes.get(volume_name))
        elif not volume_name and _delayed(claim, storage):
            delayed = True
        else:
            return UNBOUND_IMMEDIATE
        if volume_name and not ephemeral:
            zoned.append(storage.volumes.get(volume_name))
    if delayed and not binder:
        return DELAYED_BINDING
    return PodVolumes(tuple(bound), tuple(zoned))


def volumes_reason(volumes: PodVolumes, node: JsonObject) -> str | None:
    """VolumeBinding's and then VolumeZone's answer for the node; None when both let it in."""
    if volumes.none:
        return None
    labels = (node.get("metadata") or {}).get("labels") or {}
    for pv in volumes.bound:
        if pv is None:
            return PV_NOT_EXIST
        required = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required"))
        # the volume's terms are matched against the node's labels alone, as kube-scheduler does
        if required is not None and not any(
                term_matches(t, labels, "") for t in required.get("nodeSelectorTerms") or ()):
            return VOLUME_NODE_CONFLICT
    zones = {k: v for k, v in labels.items() if k in ZONE_LABELS}
    if not zones:
        return None
    for pv in volumes.zoned:
        if pv is None:
            return PV_NOT_EXIST
        for k, v in ((pv.get("metadata") or {}).get("labels") or {}).items():
            if k not in ZONE_LABELS:
                continue
            allowed = [z.strip() for z in str(v).split(ZONES_DELIMITER)]
            if "" in allowed:
                continue  # unreadable: kube-scheduler skips the label
            if zones.get(k, "") not in allowed:
                return VOLUME_ZONE_CONFLICT
    return None
