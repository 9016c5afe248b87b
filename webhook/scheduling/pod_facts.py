"""What a pod on a node shows to the rules of the pods that come after it: its namespace and
labels (inter-pod affinity, topology spread), its host ports, its required anti-affinity, the
inline disks it mounts; read once from the pod, kept small (5,000 nodes × 110 pods are held).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterator, Mapping

from ..base.json_types import JsonObject
from .effective_requests import is_sidecar
from .label_selector import Selector, selector_of
from .one_copy import Kept, hold, one_copy, one_name, release

HostPort = tuple[str, str, int]  # (host IP, protocol, port); "0.0.0.0" for any IP
ANY_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term: the pods it selects and the topology it spans."""

    namespaces: frozenset[str]
    selector: Selector
    topology_key: str
    # the term's namespaceSelector (1.24 GA); None: it has none (the namespaces listed alone)
    namespace_selector: Selector | None = None

    def selects(self, namespace: str, labels: Mapping[str, str],
                namespace_labels: Mapping[str, str] | None = None) -> bool:
        """Whether a pod of `namespace` with `labels` is one the term selects; `namespace_labels`:
        its namespace's labels, read by the term's namespaceSelector (upstream's Matches)."""
        if namespace not in self.namespaces and (
                self.namespace_selector is None
                or not self.namespace_selector.matches(namespace_labels or _NO_LABELS)):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PodFacts:
    namespace: str
    labels: Mapping[str, str]  # shared by the pods with the same labels (never changed)
    ports: tuple[HostPort, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    terminating: bool = False
    # the volumes other pods' rules compare: the inline disks (VolumeRestrictions), and the
    # claims and in-tree disks a CSI driver attaches (ReadWriteOncePod, NodeVolumeLimits:
    # csi_limits.py); empty, the one empty tuple, for a pod without any
    disks: tuple[tuple[object, ...], ...] = ()


# Replicas carry the same labels: one dict for all of them, kept while a counted pod holds it
# (one_copy.py).
LABEL_SETS: Kept[tuple[tuple[str, str], ...], Mapping[str, str]] = Kept()


def _label_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items()
                        if isinstance(k, str) and isinstance(v, str)))


def _shared(labels: Mapping[str, str]) -> Mapping[str, str]:
    if not labels:
        return _NO_LABELS
    key = _label_key(labels)
    kept = LABEL_SETS.get(key)
    return kept if kept is not None else {sys.intern(k): sys.intern(v) for k, v in key}


def hold_facts(facts: PodFacts) -> None:
    """A counted pod's facts: its labels and terms are the copies the next readings find."""
    if facts.labels:
        LABEL_SETS.hold(_label_key(facts.labels), facts.labels)
    if facts.anti_affinity:
        hold(facts.anti_affinity)


def release_facts(facts: PodFacts) -> None:
    if facts.labels:
        LABEL_SETS.release(_label_key(facts.labels))
    if facts.anti_affinity:
        release(facts.anti_affinity)


_NO_LABELS: Mapping[str, str] = {}


def written_terms(pod: object, preferred: bool = False) -> Iterator[JsonObject]:
    """The pod's pod affinity and anti-affinity terms as written: the required ones, and with
    `preferred` the preferred ones' podAffinityTerm; a part of the wrong shape holds none."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    if not isinstance(affinity, dict):
        return
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind)
        if not isinstance(section, dict):
            continue
        required = section.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(required, list):
            yield from (t for t in required if isinstance(t, dict))
        weighted = section.get("preferredDuringSchedulingIgnoredDuringExecution")
        if preferred and isinstance(weighted, list):
            yield from (w["podAffinityTerm"] for w in weighted
                        if isinstance(w, dict) and isinstance(w.get("podAffinityTerm"), dict))


def affinity_terms(pod: JsonObject, kind: str) -> tuple[AffinityTerm, ...]:
    """The pod's required terms of `kind` ("podAffinity" or "podAntiAffinity")."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    section = ((spec.get("affinity") or {}).get(kind) or {})
    terms = []
    for t in section.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        raw = t.get("namespaceSelector")
        # no selector and no list: the pod's own namespace; a selector: the list and the
        # namespaces it matches, `{}` every namespace (upstream's newAffinityTerm)
        namespaces = t.get("namespaces") or ([meta.get("namespace", "")] if raw is None else [])
        terms.append(AffinityTerm(frozenset(namespaces), selector_of(t.get("labelSelector")),
                                  t.get("topologyKey") or "",
                                  None if raw is None else selector_of(raw)))
    return one_copy(tuple(terms))


def host_ports(pod: JsonObject) -> tuple[HostPort, ...]:
    """The host ports of the pod's app containers and of its sidecars (init containers with
    `restartPolicy: Always`: kube-scheduler's NodePorts reads them from 1.34, and 1.33's
    patches); a regular init container's ports it never reads."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or ()
    items = [*(c for c in inits if is_sidecar(c)), *(spec.get("containers") or ())] \
        if inits else spec.get("containers") or ()
    out = []
    for c in items:
        for p in c.get("ports") or ():
            port = p.get("hostPort") or 0
            if isinstance(port, int) and port > 0:
                out.append((p.get("hostIP") or ANY_IP, p.get("protocol") or "TCP", port))
    return tuple(out)


# The kinds of `PodFacts.disks` that are no inline disk of VolumeRestrictions: (kind, namespace,
# claim name) of a persistentVolumeClaim volume or a generic ephemeral volume's claim; (kind,
# id) of an in-tree Azure disk or Cinder volume (counted once migrated to CSI)
CLAIM, EPHEMERAL_CLAIM, AZURE_DISK, CINDER = "claim", "ephemeral", "azuredisk", "cinder"
_NOT_DISKS = frozenset((CLAIM, EPHEMERAL_CLAIM, AZURE_DISK, CINDER))
INLINE_DISKS = frozenset(("gce", "ebs", "iscsi", "rbd"))  # the kinds VolumeRestrictions compares


def inline_disks(pod: JsonObject) -> tuple[tuple[object, ...], ...]:
    """The volumes only one node may mount read-write (GCE PD, AWS EBS, iSCSI, RBD), then the
    pod's claims and the other in-tree disks a CSI driver may attach (csi_limits.py)."""
    out: list[tuple[object, ...]] = []
    meta = pod.get("metadata") or {}
    namespace = one_name(meta.get("namespace") or "")
    for v in (pod.get("spec") or {}).get("volumes") or ():
        if (c := v.get("persistentVolumeClaim")) is not None:
            out.append((CLAIM, namespace, c.get("claimName") or ""))
        elif v.get("ephemeral") is not None:  # its claim's name: upstream's VolumeClaimName
            out.append((EPHEMERAL_CLAIM, namespace, f"{meta.get('name', '')}-{v.get('name', '')}"))
        elif (d := v.get("azureDisk")) is not None:
            out.append((AZURE_DISK, d.get("diskURI")))
        elif (d := v.get("cinder")) is not None:
            out.append((CINDER, d.get("volumeID")))
        elif (d := v.get("gcePersistentDisk")) is not None:
            out.append(("gce", d.get("pdName"), bool(d.get("readOnly"))))
        elif (d := v.get("awsElasticBlockStore")) is not None:
            out.append(("ebs", d.get("volumeID")))
        elif (d := v.get("iscsi")) is not None:
            out.append(("iscsi", d.get("iqn"), bool(d.get("readOnly"))))
        elif (d := v.get("rbd")) is not None:
            out.append(("rbd", frozenset(d.get("monitors") or ()), d.get("pool") or "rbd",
                        d.get("image"), bool(d.get("readOnly"))))
    return tuple(out)


def disks_conflict(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """kube-scheduler's VolumeRestrictions: the same disk, unless both mount it read-only
    (an EBS volume even then). Claims and the other attachable volumes never conflict so."""
    if a[0] != b[0] or a[0] in _NOT_DISKS:
        return False
    if a[0] == "ebs":
        return a[1] == b[1]
    if a[0] == "rbd":
        return bool(a[1] & b[1]) and a[2:4] == b[2:4] and not (a[4] and b[4])  # type: ignore[operator]
    return a[1] == b[1] and not (a[2] and b[2])


def facts_of(pod: JsonObject) -> PodFacts:
    meta = pod.get("metadata") or {}
    return PodFacts(one_name(meta.get("namespace") or ""), _shared(meta.get("labels") or {}),
                    host_ports(pod),
                    affinity_terms(pod, "podAntiAffinity"), bool(meta.get("deletionTimestamp")),
                    inline_disks(pod))
