"""kube-scheduler's NodeVolumeLimits for CSI drivers (nodevolumelimits/csi.go): per driver,
the unique volumes the node's pods already use plus the pod's new ones must not pass the
driver's attach limit on the node, `CSINode.spec.drivers[].allocatable.count` (over the node's
`status.allocatable` `attachable-volumes-csi-<driver>`, which old kubelets wrote).

Which volumes count, as upstream's filterAttachableVolumes reads them:
- a claim (persistentVolumeClaim or a generic ephemeral volume's) bound to a CSI volume:
  (driver, volumeHandle);
- a claim not bound yet, or whose volume is not found: its class's provisioner is the driver,
  the claim its own volume (two pods naming it count it once); a claim with no class, or a
  class not found, counts nothing (it binds before any scheduler reads it);
- an in-tree AWS EBS, GCE PD, Azure disk or Cinder volume (inline, or a claim's volume, or an
  unbound claim's in-tree provisioner) once migrated on the node (the CSINode's
  `storage.alpha.kubernetes.io/migrated-plugins` names the plugin): its CSI driver's;
- nothing else (a CSI inline ephemeral volume, `csi:` in the pod, is not attached this way).
An existing pod's claim not found counts nothing. No CSINode and no allocatable entry, or a
driver the CSINode lists without a count: no limit for that driver. A pod without any new
volume of a limited driver passes.
"""

from __future__ import annotations

from typing import Collection, Iterable

from ..base.json_types import JsonObject
from .pod_facts import AZURE_DISK, CINDER, CLAIM, EPHEMERAL_CLAIM
from .quantity import value
from .reasons import MAX_VOLUME_COUNT
from .volumes import Storage, class_of

Entry = tuple[object, ...]  # one of PodFacts.disks
ATTACHABLE = frozenset((CLAIM, EPHEMERAL_CLAIM, "ebs", "gce", AZURE_DISK, CINDER))
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
ALLOCATABLE_PREFIX = "attachable-volumes-csi-"
# in-tree plugin -> the CSI driver it migrates to (csi-translation-lib's names)
EBS, GCE_PD = "kubernetes.io/aws-ebs", "kubernetes.io/gce-pd"
AZURE, OPENSTACK = "kubernetes.io/azure-disk", "kubernetes.io/cinder"
MIGRATES_TO = {EBS: "ebs.csi.aws.com", GCE_PD: "pd.csi.storage.gke.io",
               AZURE: "disk.csi.azure.com", OPENSTACK: "cinder.csi.openstack.org"}
_INLINE_PLUGIN = {"ebs": EBS, "gce": GCE_PD, AZURE_DISK: AZURE, CINDER: OPENSTACK}
GCE_UNSPECIFIED = "UNSPECIFIED"
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")

Volume = tuple[str, str]  # (driver, unique volume id)


def attachable(disks: tuple[Entry, ...]) -> tuple[Entry, ...]:
    """The pod's volumes this rule reads (of its PodFacts.disks); the empty tuple for most."""
    if not disks:
        return ()
    return tuple(d for d in disks if d[0] in ATTACHABLE)


def csi_limits_reason(wanted: tuple[Entry, ...], node: JsonObject, used: Collection[Entry],
                      storage: Storage) -> str | None:
    """NodeVolumeLimits' answer for the node: MAX_VOLUME_COUNT or None. `wanted`: the pod's
    attachable volumes; `used`: the volumes of the pods on the node (PodIndex.disks)."""
    name = (node.get("metadata") or {}).get("name") or ""
    csinode = storage.csinodes.get(name)
    new = _resolved(wanted, csinode, storage)
    if not new:
        return None
    limits = volume_limits(node, csinode)
    if not limits:
        return None
    adding: dict[str, int] = {}
    for driver, _ in new:
        adding[driver] = adding.get(driver, 0) + 1
    most = len(used)  # the node's volumes bound what is attached: often none is read
    if all(most + n <= limits.get(d, most + n) for d, n in adding.items()):
        return None
    attached: dict[str, int] = {}
    for volume in _resolved(used, csinode, storage):
        new.discard(volume)  # one volume used by several pods counts once
        attached[volume[0]] = attached.get(volume[0], 0) + 1
    adding = {}
    for driver, _ in new:
        adding[driver] = adding.get(driver, 0) + 1
    for driver, count in adding.items():
        limit = limits.get(driver)
        if limit is not None and attached.get(driver, 0) + count > limit:
            return MAX_VOLUME_COUNT
    return None


def volume_limits(node: JsonObject, csinode: JsonObject | None) -> dict[str, int]:
    """driver -> the node's attach limit: the node's allocatable entries, then the CSINode's
    counts over them (upstream's getVolumeLimits)."""
    limits: dict[str, int] = {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if isinstance(allocatable, dict):
        for key, raw in allocatable.items():
            if isinstance(key, str) and key.startswith(ALLOCATABLE_PREFIX):
                limits[key[len(ALLOCATABLE_PREFIX):]] = value(raw)
    if csinode is not None:
        for d in (csinode.get("spec") or {}).get("drivers") or ():
            count = (d.get("allocatable") or {}).get("count")
            if isinstance(count, int) and isinstance(d.get("name"), str):
                limits[d["name"]] = count
    return limits


# claims kept in a memo at most (Storage.attached_as: about 100 B each); beyond, it starts again
MEMO_KEPT = 1_000_000


def _resolved(entries: Iterable[Entry], csinode: JsonObject | None,
              storage: Storage) -> set[Volume]:
    out = set()
    memo = storage.attached_as
    for e in entries:
        if e[0] not in ATTACHABLE:
            continue
        if e[0] in (CLAIM, EPHEMERAL_CLAIM):
            # a node full of claims is read once, not per decision: what does not depend on
            # the node (a CSI volume, a CSI class) is kept until the storage changes
            if e in memo:
                volume = memo[e]
            else:
                volume, of_node = _claim_volume(e, csinode, storage)
                if not of_node:
                    if len(memo) >= MEMO_KEPT:
                        memo.clear()
                    memo[e] = volume
        else:
            volume = _inline_volume(e, csinode)
        if volume is not None:
            out.add(volume)
    return out


def _claim_volume(e: Entry, csinode: JsonObject | None,
                  storage: Storage) -> tuple[Volume | None, bool]:
    """The claim's volume, and whether the reading depends on the node (an in-tree plugin's
    migration)."""
    namespace, name = str(e[1]), str(e[2])
    claim = storage.claims.get((namespace, name))
    if claim is None:
        return None, False  # an existing pod's (the pod's own refuses it before: volumes.pod_volumes)
    pv = storage.volumes.get((claim.get("spec") or {}).get("volumeName") or "")
    if pv is None:  # unbound, or bound to a volume not found: its class tells the driver
        provisioner = (storage.classes.get(class_of(claim)) or {}).get("provisioner")
        if not isinstance(provisioner, str) or not provisioner:
            return None, False
        if provisioner in MIGRATES_TO:
            if not migrated(csinode, provisioner):
                return None, True
            return (MIGRATES_TO[provisioner], f"\0claim {namespace}/{name}"), True
        return (provisioner, f"\0claim {namespace}/{name}"), False  # no volume id yet: the claim's
    spec = pv.get("spec") or {}
    csi = spec.get("csi")
    if csi is not None:
        driver, handle = csi.get("driver"), csi.get("volumeHandle")
        return ((driver, handle) if isinstance(driver, str) and isinstance(handle, str)
                and driver and handle else None), False
    for plugin, source, key in _PV_SOURCES:
        src = spec.get(source)
        if src is not None:
            if not migrated(csinode, plugin):
                return None, True
            handle = _handle(plugin, src.get(key), (pv.get("metadata") or {}).get("labels"))
            return ((MIGRATES_TO[plugin], handle) if handle else None), True
    return None, False


_PV_SOURCES = ((EBS, "awsElasticBlockStore", "volumeID"), (GCE_PD, "gcePersistentDisk", "pdName"),
               (AZURE, "azureDisk", "diskURI"), (OPENSTACK, "cinder", "volumeID"))


def _inline_volume(e: Entry, csinode: JsonObject | None) -> Volume | None:
    plugin = _INLINE_PLUGIN[str(e[0])]
    if not migrated(csinode, plugin):
        return None
    handle = _handle(plugin, e[1], None)
    return (MIGRATES_TO[plugin], handle) if handle else None


def _handle(plugin: str, volume_id: object, labels: object) -> str | None:
    """The volume handle csi-translation-lib gives the in-tree volume."""
    if not isinstance(volume_id, str) or not volume_id:
        return None
    if plugin == EBS:  # aws://<zone>/<vol-id> or a bare id
        return volume_id.rsplit("/", 1)[-1] if volume_id.startswith("aws://") else volume_id
    if plugin == GCE_PD:
        zone = GCE_UNSPECIFIED
        if isinstance(labels, dict):
            zone = next((labels[k] for k in ZONE_LABELS if isinstance(labels.get(k), str)), zone)
        return f"projects/{GCE_UNSPECIFIED}/zones/{zone}/disks/{volume_id}"
    return volume_id


def migrated(csinode: JsonObject | None, plugin: str) -> bool:
    """Whether the node runs the in-tree plugin's volumes through its CSI driver."""
    if csinode is None:
        return False
    listed = ((csinode.get("metadata") or {}).get("annotations") or {}).get(MIGRATED_PLUGINS)
    return isinstance(listed, str) and plugin in listed.split(",")
