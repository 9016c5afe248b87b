"""Random clusters and pods for comparing the scheduling core's node rules with kube-scheduler
1.20's filters (tests/scheduling/test_kube_scheduler_filters.py). Plain data, no I/O: the same
seed gives the same cluster and the same pods.

A cluster has 4 to 10 Ready nodes (zone and region labels, some missing; taints of every
effect; some cordoned; cpu, memory, pods, ephemeral storage, hugepages and an extended resource),
two or three namespaces, volumes and claims (local volumes pinned to a node, zonal volumes with
zone or region labels, claims unbound with an Immediate class, claims pre-bound but not yet
bound, claims being deleted), pods already there (bound, some terminating, some with required
anti-affinity; some pending for another scheduler) and a sequence of pods to schedule one at a
time, with requests, host ports, node selectors and required node affinity, tolerations, required
pod affinity and anti-affinity, topology spread constraints and claims (a claim that does not
exist too).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.builders import csinode

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
REGION_BETA = "failure-domain.beta.kubernetes.io/region"
DISK = "example.com/disktype"
GEN = "example.com/gen"  # a number, for Gt and Lt
RDMA = "example.com/rdma"  # an extended resource
HUGEPAGES = "hugepages-2Mi"
RUNTIME_CLASS = "kata"  # made once, with a pod overhead (runtime_class())
OVERHEAD = {"cpu": "250m", "memory": "160Mi"}
OTHER_SCHEDULER = "someone-else"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ZONES = ("zone-a", "zone-b", "zone-c")

# What a pod of the sequence may carry; `features` names them for the coverage checks.
FEATURES = (
    "requests", "ephemeral-storage", "hugepages", "extended-resource", "init-containers",
    "overhead", "host-ports", "host-network", "node-selector", "node-affinity", "tolerations",
    "pod-affinity", "pod-anti-affinity", "affinity-namespaces", "spread", "claim-local",
    "claim-zonal", "claim-missing", "claim-unbound-immediate", "claim-prebound",
    "claim-deleting", "claim-lost", "inline-disk", "claim-csi",
)
# Claim names carry their kind: <tag>-<ns>-<kind>-<n>
CLAIM_KINDS = ("local", "zonal", "unbound", "prebound", "deleting", "lost")


@dataclass
class Cluster:
    seed: int
    tag: str
    namespaces: list[str]
    nodes: list[dict]
    classes: list[dict]
    claims: list[dict]  # created before the volumes; status written after
    volumes: list[dict]
    deleting_claims: list[tuple[str, str]]  # (namespace, name): deleted once made (a finalizer keeps them)
    existing: list[dict]  # pods made before the sequence: bound (nodeName) or another scheduler's
    terminating: list[tuple[str, str]]  # existing pods deleted with a grace period once made
    pods: list[dict] = field(default_factory=list)  # the sequence
    # pods of the sequence deleted with a grace period once bound: they stay, terminating
    terminate_when_bound: set[str] = field(default_factory=set)
    # the CSINodes (their drivers' attach limits), written before the nodes
    csinodes: list[dict] = field(default_factory=list)


def runtime_class() -> dict:
    """The RuntimeClass whose overhead the API server adds to the pods naming it."""
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": RUNTIME_CLASS}, "handler": RUNTIME_CLASS,
            "overhead": {"podFixed": dict(OVERHEAD)}}


def _pick(rng: random.Random, *weighted):
    """One of (weight, value) pairs."""
    total = sum(w for w, _ in weighted)
    x = rng.uniform(0, total)
    for w, v in weighted:
        x -= w
        if x <= 0:
            return v
    return weighted[-1][1]


# -- nodes -------------------------------------------------------------------------------------


def _node(rng: random.Random, name: str, zones: list[str], regions: bool) -> dict:
    labels = {HOSTNAME: name}
    zone = rng.choice(zones)
    mode = _pick(rng, (12, "none"), (8, "ga"), (8, "beta"), (65, "both"), (4, "empty"),
                 (3, "differ"))
    if mode == "empty":  # a label with the empty value: a topology value like any other
        zone = ""
    if mode in ("ga", "both", "empty", "differ"):
        labels[ZONE] = zone
    if mode in ("beta", "both", "empty"):
        labels[ZONE_BETA] = zone
    if mode == "differ":  # the two labels disagree
        labels[ZONE_BETA] = rng.choice([z for z in ZONES if z != zone])
    if regions and (mode != "none" or rng.random() < 0.5):
        region = "region-1" if zone != "zone-c" else "region-2"
        labels[REGION] = region
        if rng.random() < 0.8:
            labels[REGION_BETA] = region
    if rng.random() < 0.6:
        labels[DISK] = rng.choice(["ssd", "hdd"])
    if rng.random() < 0.5:
        labels[GEN] = rng.choice(["1", "2", "3", "3", "01", "x"])  # "x": no number to compare
    taints = []
    for p, taint in ((0.15, {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
                     (0.08, {"key": "dedicated", "value": "infra", "effect": "NoExecute"}),
                     (0.15, {"key": "spot", "effect": "PreferNoSchedule"}),
                     (0.08, {"key": "maintenance", "effect": "NoSchedule"}),
                     (0.04, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"})):
        if rng.random() < p:
            taints.append(dict(taint))
    allocatable = {
        "cpu": rng.choice(["2", "4", "4500m", "8"]),
        "memory": rng.choice(["4Gi", "8Gi", "6000Mi", "16Gi"]),
        "pods": rng.choice(["3", "5", "8", "110", "110"]),
    }
    capacity = dict(allocatable)
    if rng.random() < 0.04:  # the allocatable does not list it: nothing of it to give
        del allocatable[rng.choice(["cpu", "memory", "pods"])]
    storage = rng.choice(["10Gi", "30Gi"])
    capacity["ephemeral-storage"] = storage
    if rng.random() < 0.9:  # else the node's allocatable does not list it: none to give
        allocatable["ephemeral-storage"] = storage
    if rng.random() < 0.4:
        allocatable[HUGEPAGES] = capacity[HUGEPAGES] = rng.choice(["64Mi", "256Mi"])
    if rng.random() < 0.3:
        allocatable[RDMA] = capacity[RDMA] = rng.choice(["1", "2"])
    spec: dict = {"taints": taints}
    if rng.random() < 0.12:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": labels}, "spec": spec,
            "status": {"capacity": capacity, "allocatable": allocatable}}


# -- volumes and claims ------------------------------------------------------------------------


def _claim(ns: str, name: str, cls: str | None, volume: str | None, bound: bool) -> dict:
    meta: dict = {"name": name, "namespace": ns}
    if bound:
        meta["annotations"] = {BIND_COMPLETED: "yes", BOUND_BY_CONTROLLER: "yes"}
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if cls is not None:
        spec["storageClassName"] = cls
    if volume is not None:
        spec["volumeName"] = volume
    status = ({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}
              if bound else {"phase": "Pending"})
    return {"metadata": meta, "spec": spec, "status": status}


def _volume(name: str, cls: str, source: dict, claim: tuple[str, str] | None,
            labels: dict | None = None, affinity: list[dict] | None = None) -> dict:
    spec: dict = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": cls, **source}
    if claim is not None:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                            "namespace": claim[0], "name": claim[1]}
    if affinity is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": affinity}}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"phase": "Bound" if claim else "Available"}}


def _zonal_volume(rng: random.Random, zones: list[str]) -> tuple[dict, list[dict] | None]:
    """The labels of a volume of some zones (VolumeZone reads them), and sometimes a node
    affinity on the zone too (VolumeBinding reads that)."""
    zone = rng.choice(zones)
    labels: dict = {}
    mode = _pick(rng, (35, "both"), (20, "ga"), (15, "beta"), (15, "multi"), (15, "region"))
    if mode in ("both", "ga"):
        labels[ZONE] = zone
    if mode in ("both", "beta"):
        labels[ZONE_BETA] = zone
    if mode == "multi":  # several zones in one value, "__" between them
        labels[rng.choice([ZONE, ZONE_BETA])] = "__".join(sorted(rng.sample(ZONES, 2)))
    if mode == "region":
        labels[rng.choice([REGION, REGION_BETA])] = rng.choice(["region-1", "region-2"])
    affinity = None
    if rng.random() < 0.3:
        affinity = [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]
    return labels, affinity


def _storage(rng: random.Random, tag: str, namespaces: list[str], node_names: list[str],
             zones: list[str]):
    local, immediate = f"{tag}-local", f"{tag}-immediate"
    classes = [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": local},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": immediate},
         "provisioner": "example.com/nothing", "volumeBindingMode": "Immediate"},
    ]
    claims, volumes, deleting = [], [], []
    for ns in namespaces:
        base = f"{tag}-{ns.rsplit('-', 1)[-1]}"
        for i, node in enumerate(rng.sample(node_names, min(len(node_names), rng.randint(1, 3)))):
            name, pv = f"{base}-local-{i}", f"{base}-pv-local-{i}"
            claims.append(_claim(ns, name, local, pv, True))
            host = [{"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]
            r = rng.random()
            if r < 0.2:  # two nodes may mount it
                other = rng.choice(node_names)
                host[0]["matchExpressions"][0]["values"] = sorted({node, other})
            elif r < 0.35:  # by the node's name: a field, not a label
                host = [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                          "values": [node]}]}]
            volumes.append(_volume(pv, local, {"local": {"path": f"/mnt/{pv}"}}, (ns, name),
                                   affinity=host))
        for i in range(rng.randint(1, 3)):
            name, pv = f"{base}-zonal-{i}", f"{base}-pv-zonal-{i}"
            cls = rng.choice([immediate, ""])
            claims.append(_claim(ns, name, cls, pv, True))
            labels, affinity = _zonal_volume(rng, zones)
            volumes.append(_volume(pv, cls, {"nfs": {"server": "10.0.0.9", "path": f"/{pv}"}},
                                   (ns, name), labels, affinity))
        # unbound: an Immediate class, no class at all, or a class that does not exist
        cls = rng.choice([immediate, "", f"{tag}-no-such-class"])
        claims.append(_claim(ns, f"{base}-unbound-0", cls, None, False))
        if rng.random() < 0.5:  # names its volume, the binding not completed yet
            name, pv = f"{base}-prebound-0", f"{base}-pv-prebound-0"
            claim = _claim(ns, name, immediate, pv, False)
            if rng.random() < 0.5:  # the phase says Bound, the bind-completed annotation is missing
                claim["status"] = {"phase": "Bound", "accessModes": ["ReadWriteOnce"],
                                   "capacity": {"storage": "1Gi"}}
            claims.append(claim)
            volumes.append(_volume(pv, immediate, {"nfs": {"server": "10.0.0.9", "path": f"/{pv}"}},
                                   None))
        if rng.random() < 0.5:  # bound, then deleted: kept by its protection finalizer
            name, pv = f"{base}-deleting-0", f"{base}-pv-deleting-0"
            claims.append(_claim(ns, name, immediate, pv, True))
            volumes.append(_volume(pv, immediate, {"nfs": {"server": "10.0.0.9", "path": f"/{pv}"}},
                                   (ns, name)))
            deleting.append((ns, name))
        if rng.random() < 0.5:  # bound to a volume that is gone
            lost = _claim(ns, f"{base}-lost-0", immediate, f"{base}-pv-lost-0", True)
            lost["status"]["phase"] = "Lost"
            claims.append(lost)
    return classes, claims, volumes, deleting


# -- pods --------------------------------------------------------------------------------------

APPS = ("web", "db", "cache")


def _labels(rng: random.Random) -> dict:
    labels = {}
    if rng.random() < 0.85:
        labels["app"] = rng.choice(APPS)
    if rng.random() < 0.5:
        labels["tier"] = rng.choice(["front", "back"])
    if rng.random() < 0.3:
        labels["team"] = rng.choice(["red", "blue"])
    return labels


def _selector(rng: random.Random, own: dict) -> dict | None:
    """A label selector, often one that matches the pod's own labels."""
    app = own.get("app") if own.get("app") and rng.random() < 0.6 else rng.choice(APPS)
    return _pick(
        rng,
        (40, {"matchLabels": {"app": app}}),
        (10, {"matchLabels": {"app": app, "tier": own.get("tier") or rng.choice(["front", "back"])}}),
        (12, {"matchExpressions": [{"key": "app", "operator": "In",
                                    "values": sorted({app, rng.choice(APPS)})}]}),
        (8, {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        (8, {"matchLabels": {"app": app},
             "matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}),
        (8, {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": [app]}]}),
        (3, {}),  # every pod
        (2, None),  # no selector: no pod
    )


def _affinity_terms(rng: random.Random, own: dict, ns: str, namespaces: list[str],
                    count: int) -> list[dict]:
    terms = []
    for _ in range(count):
        term: dict = {"topologyKey": _pick(rng, (50, HOSTNAME), (36, ZONE), (8, ZONE_BETA),
                                           (6, REGION))}
        selector = _selector(rng, own)
        if selector is not None:
            term["labelSelector"] = selector
        r = rng.random()
        others = [n for n in namespaces if n != ns]
        if r < 0.2:
            term["namespaces"] = [rng.choice(others)]
        elif r < 0.35:
            term["namespaces"] = sorted([ns, rng.choice(others)])
        terms.append(term)
    return terms


def _quantity(rng: random.Random, choices) -> str | None:
    return rng.choice(choices)


def _container(rng: random.Random, name: str, heavy: bool = False) -> dict:
    requests: dict = {}
    limits: dict = {}
    cpu = _quantity(rng, [None, "100m", "250m", "500m", "1", "1500m", "0.75", "1001m", "2500u"]
                    + (["3", "2"] if heavy else []))
    memory = _quantity(rng, [None, "64Mi", "256Mi", "512Mi", "1Gi", "1.5Gi", "300M", "1e9",
                             "1073741825"] + (["6Gi", "3Gi"] if heavy else []))
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    if rng.random() < 0.25:
        requests["ephemeral-storage"] = rng.choice(["1Gi", "4Gi", "20Gi"])
    if rng.random() < 0.1:  # needs limits equal to requests, and cpu or memory in the limits
        requests[HUGEPAGES] = limits[HUGEPAGES] = rng.choice(["32Mi", "128Mi"])
        requests.setdefault("memory", "64Mi")
        limits["memory"] = requests["memory"]
    if rng.random() < 0.1:
        requests[RDMA] = limits[RDMA] = "1"
    c: dict = {"name": name, "image": "busybox:1.36", "command": ["sleep", "3600"]}
    if requests and not limits and rng.random() < 0.15:  # the API server copies them to requests
        requests, limits = {}, requests
    if requests or limits:
        c["resources"] = {"requests": requests, **({"limits": limits} if limits else {})}
    return c


def _ports(rng: random.Random) -> list[dict]:
    ports = []
    for hp in rng.sample([8080, 8081, 9000], rng.randint(1, 2)):
        port: dict = {"containerPort": 80 + len(ports), "hostPort": hp}
        port["protocol"] = _pick(rng, (70, "TCP"), (25, "UDP"), (5, "SCTP"))
        ip = _pick(rng, (60, None), (15, "0.0.0.0"), (15, "127.0.0.2"), (10, "127.0.0.3"))
        if ip:
            port["hostIP"] = ip
        ports.append(port)
    return ports


def _node_affinity(rng: random.Random, nodes: list[str]) -> list[dict]:
    exprs = [
        {"key": DISK, "operator": "In", "values": ["ssd"]},
        {"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]},
        {"key": ZONE, "operator": "NotIn", "values": ["zone-c"]},
        {"key": DISK, "operator": "Exists"},
        {"key": DISK, "operator": "DoesNotExist"},
        {"key": GEN, "operator": "Gt", "values": ["1"]},
        {"key": GEN, "operator": "Lt", "values": ["3"]},
        {"key": REGION, "operator": "In", "values": ["region-1"]},
        {"key": GEN, "operator": "Gt", "values": ["1.5"]},  # not an integer: matches no node
    ]
    terms = []
    for _ in range(_pick(rng, (70, 1), (30, 2))):
        term: dict = {}
        chosen = rng.sample(exprs, _pick(rng, (65, 1), (35, 2)))
        if rng.random() < 0.15:  # by name
            term["matchFields"] = [{"key": "metadata.name", "operator": rng.choice(["In", "NotIn"]),
                                    "values": [rng.choice(nodes)]}]
            if rng.random() < 0.5:
                chosen = []
        if chosen and rng.random() < 0.05:
            chosen = []  # an empty term: matches no node
        if chosen:
            term["matchExpressions"] = [dict(e, values=list(e["values"])) if "values" in e else dict(e)
                                        for e in chosen]
        terms.append(term)
    return terms


TOLERATIONS = (
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoExecute",
     "tolerationSeconds": 60},
    {"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "NoExecute"},
    {"operator": "Exists"},
    {"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "maintenance"},  # no operator: Equal, and no value: the taint's empty one
    {"key": "dedicated", "value": "gpu"},
)


def _volumes(rng: random.Random, tag: str, ns: str, claims: list[dict]) -> list[dict]:
    mine = [c["metadata"]["name"] for c in claims if c["metadata"]["namespace"] == ns]
    by_kind = {k: [n for n in mine if f"-{k}-" in n] for k in CLAIM_KINDS}
    names: list[str] = []
    for _ in range(_pick(rng, (75, 1), (25, 2))):
        kind = _pick(rng, (30, "local"), (30, "zonal"), (8, "missing"), (8, "unbound"),
                     (12, "prebound"), (12, "deleting"), (14, "lost"))
        if kind == "missing":
            names.append(f"{tag}-{ns.rsplit('-', 1)[-1]}-missing-0")
        elif by_kind[kind]:
            names.append(rng.choice(by_kind[kind]))
    return [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": n}}
            for i, n in enumerate(dict.fromkeys(names))]


def _disks(rng: random.Random) -> list[dict]:
    """Inline disks that one node may mount read-write once (VolumeRestrictions)."""
    disks = []
    for i in range(_pick(rng, (80, 1), (20, 2))):
        kind = _pick(rng, (35, "gce"), (25, "ebs"), (20, "iscsi"), (20, "rbd"))
        read_only = rng.random() < 0.4
        if kind == "gce":
            source = {"gcePersistentDisk": {"pdName": rng.choice(["pd-1", "pd-2"]),
                                            "readOnly": read_only}}
        elif kind == "ebs":
            source = {"awsElasticBlockStore": {"volumeID": rng.choice(["vol-1", "vol-2"])}}
        elif kind == "iscsi":
            source = {"iscsi": {"targetPortal": "10.0.0.5:3260", "lun": 0, "readOnly": read_only,
                                "iqn": rng.choice(["iqn.2020-01.com.example:t1",
                                                   "iqn.2020-01.com.example:t2"])}}
        else:
            rbd: dict = {"monitors": sorted(rng.sample(["10.0.0.6:6789", "10.0.0.7:6789",
                                                        "10.0.0.8:6789"], rng.randint(1, 2))),
                         "image": rng.choice(["img-1", "img-2"]), "readOnly": read_only}
            if rng.random() < 0.5:
                rbd["pool"] = rng.choice(["rbd", "rbd", "fast"])  # the API server's default: rbd
            source = {"rbd": rbd}
        disks.append({"name": f"disk{i}", **source})
    return disks


def _pod(rng: random.Random, name: str, ns: str, cluster: Cluster, scheduler: str) -> dict:
    node_names = [n["metadata"]["name"] for n in cluster.nodes]
    labels = _labels(rng)
    heavy = rng.random() < 0.15
    containers = [_container(rng, "main", heavy)]
    if rng.random() < 0.2:
        containers.append(_container(rng, "side"))
    spec: dict = {"schedulerName": scheduler, "containers": containers,
                  "terminationGracePeriodSeconds": 5}
    if rng.random() < 0.1:
        spec["initContainers"] = [_container(rng, "init", heavy=True)]
    if rng.random() < 0.08:
        spec["runtimeClassName"] = RUNTIME_CLASS
    if rng.random() < 0.25:
        containers[0]["ports"] = _ports(rng)
    elif rng.random() < 0.04:  # the API server fills hostPort in from containerPort
        spec["hostNetwork"] = True
        containers[0]["ports"] = [{"containerPort": rng.choice([8080, 9000])}]
    elif rng.random() < 0.1:
        containers[0]["ports"] = [{"containerPort": 8080}]  # no host port
    if rng.random() < 0.2:
        spec["nodeSelector"] = _pick(
            rng, (40, {DISK: "ssd"}), (30, {ZONE: rng.choice(ZONES)}),
            (15, {HOSTNAME: rng.choice(node_names)}), (15, {ZONE_BETA: "zone-a", DISK: "hdd"}),
            (5, {ZONE: ""}))
    affinity: dict = {}
    if rng.random() < 0.22:
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": _node_affinity(rng, node_names)}}
        if rng.random() < 0.3:
            affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 10, "preference": {"matchExpressions": [
                    {"key": DISK, "operator": "In", "values": ["hdd"]}]}}]
    if rng.random() < 0.18:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution":
                                   _affinity_terms(rng, labels, ns, cluster.namespaces,
                                                   _pick(rng, (75, 1), (25, 2)))}
    if rng.random() < 0.22:
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution":
                                       _affinity_terms(rng, labels, ns, cluster.namespaces,
                                                       _pick(rng, (75, 1), (25, 2)))}
    for kind in ("podAffinity", "podAntiAffinity"):
        if rng.random() < 0.08:  # preferred: no filter reads it
            affinity.setdefault(kind, {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": 50, "podAffinityTerm": _affinity_terms(rng, labels, ns, cluster.namespaces,
                                                                  1)[0]}]
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.35:
        spec["tolerations"] = [dict(t) for t in rng.sample(TOLERATIONS, rng.randint(1, 2))]
    if rng.random() < 0.22:
        keys = rng.sample([HOSTNAME, ZONE, ZONE_BETA], _pick(rng, (75, 1), (25, 2)))
        constraints = []
        for key in keys:
            c: dict = {"maxSkew": rng.choice([1, 1, 2]), "topologyKey": key,
                       "whenUnsatisfiable": "DoNotSchedule"}
            selector = _selector(rng, labels)
            if selector is not None:
                c["labelSelector"] = selector
            constraints.append(c)
        if rng.random() < 0.2:  # a soft one: no filter reads it
            constraints.append({"maxSkew": 1, "topologyKey": REGION,
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": {"app": "web"}}})
        spec["topologySpreadConstraints"] = constraints
    if rng.random() < 0.25:
        volumes = _volumes(rng, cluster.tag, ns, cluster.claims)
        if volumes:
            spec["volumes"] = volumes
    if rng.random() < 0.1:
        spec["volumes"] = spec.get("volumes", []) + _disks(rng)
    if spec.get("initContainers") and rng.random() < 0.3:  # no filter reads an init container's
        spec["initContainers"][0]["ports"] = [{"containerPort": 70, "hostPort": 9000}]
    meta: dict = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _existing(rng: random.Random, cluster: Cluster, i: int) -> dict:
    """A pod already there: bound by hand (spec.nodeName), with labels, requests, host ports and
    sometimes required anti-affinity that later pods must respect."""
    ns = rng.choice(cluster.namespaces)
    p = _pod(rng, f"{cluster.tag}-old-{i}", ns, cluster, OTHER_SCHEDULER)
    spec = p["spec"]
    spec.pop("volumes", None)
    if rng.random() < 0.2:
        spec["volumes"] = _disks(rng)
    spec.pop("topologySpreadConstraints", None)
    spec.pop("runtimeClassName", None)
    spec.pop("initContainers", None)
    affinity = spec.pop("affinity", {})
    if rng.random() < 0.4:
        affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                        _affinity_terms(rng, p["metadata"].get("labels", {}), ns,
                                                        cluster.namespaces, 1)}}
        spec["affinity"] = affinity
    if rng.random() < 0.35 and not spec["containers"][0].get("ports"):
        spec["containers"][0]["ports"] = _ports(rng)
    spec.pop("nodeSelector", None)
    spec["nodeName"] = rng.choice(cluster.nodes)["metadata"]["name"]
    return p


def make_cluster(seed: int, index: int, pods: int, scheduler: str) -> Cluster:
    """Cluster `index` (its names begin with c<index>) from `seed`, with `pods` pods to schedule
    by `scheduler`."""
    rng = random.Random(seed)
    tag = f"c{index:02d}"
    namespaces = [f"{tag}-{s}" for s in ("a", "b", "c")[:rng.choice([2, 3])]]
    zones = sorted(rng.sample(ZONES, rng.randint(1, 3)))
    regions = rng.random() < 0.5
    nodes = [_node(rng, f"{tag}-n{i}", zones, regions) for i in range(rng.randint(4, 10))]
    names = [n["metadata"]["name"] for n in nodes]
    classes, claims, volumes, deleting = _storage(rng, tag, namespaces, names, zones)
    cluster = Cluster(seed, tag, namespaces, nodes, classes, claims, volumes, deleting, [], [])
    for i in range(rng.randint(2, 6)):
        p = _existing(rng, cluster, i)
        cluster.existing.append(p)
        if rng.random() < 0.2:
            cluster.terminating.append((p["metadata"]["namespace"], p["metadata"]["name"]))
    for i in range(rng.randint(0, 2)):  # pending for another scheduler: no filter reads them
        p = _pod(rng, f"{cluster.tag}-other-{i}", rng.choice(namespaces), cluster, OTHER_SCHEDULER)
        p["spec"].pop("volumes", None)
        cluster.existing.append(p)
    cluster.pods = [_pod(rng, f"{tag}-p{j:02d}", rng.choice(namespaces), cluster, scheduler)
                    for j in range(pods)]
    cluster.terminate_when_bound = {p["metadata"]["name"] for p in cluster.pods
                                    if rng.random() < 0.1}
    _csi(random.Random(f"{seed}/csi"), cluster)
    return cluster


CSI_DRIVERS = ("csi-a.example.com", "csi-b.example.com")


def _csi(rng: random.Random, c: Cluster) -> None:
    """CSI volumes bound to claims, some pods using them, and the nodes' attach limits
    (NodeVolumeLimits), drawn from a generator of their own: the rest of the cluster is the one
    the seed gave without them. The volumes carry no node affinity and no zone, so no other
    filter reads them."""
    for n in c.nodes:
        if rng.random() < 0.25:
            continue  # no CSINode: no limit
        counts = {d: _pick(rng, (30, 1), (30, 2), (15, 3), (10, 0), (15, None))
                  for d in CSI_DRIVERS if rng.random() < 0.8}
        c.csinodes.append(csinode(n["metadata"]["name"], counts))
    mine: dict[str, list[str]] = {}
    for ns in c.namespaces:
        base = f"{c.tag}-{ns.rsplit('-', 1)[-1]}"
        for i in range(4):
            name, pv = f"{base}-csi-{i}", f"{base}-pv-csi-{i}"
            c.claims.append(_claim(ns, name, "", pv, True))
            source = {"csi": {"driver": rng.choice(CSI_DRIVERS), "volumeHandle": f"{pv}-handle"}}
            c.volumes.append(_volume(pv, "", source, (ns, name)))
            mine.setdefault(ns, []).append(name)
    for p, share in [(p, 0.5) for p in c.existing if p["spec"].get("nodeName")] + \
            [(p, 0.35) for p in c.pods]:
        if rng.random() < share:
            names = rng.sample(mine[p["metadata"]["namespace"]], rng.choice([1, 1, 2]))
            p["spec"].setdefault("volumes", []).extend(
                {"name": f"csi{i}", "persistentVolumeClaim": {"claimName": n}}
                for i, n in enumerate(names))


def claim_kind(name: str) -> str:
    for kind in (*CLAIM_KINDS, "missing"):
        if f"-{kind}-" in name:
            return kind
    return "unknown"


def features(pod: dict) -> set[str]:
    """What the pod carries, by FEATURES' names."""
    spec = pod.get("spec") or {}
    out: set[str] = set()
    containers = spec.get("containers") or []
    requested = {k for c in containers + (spec.get("initContainers") or [])
                 for k in ((c.get("resources") or {}).get("requests") or {})}
    if requested & {"cpu", "memory"}:
        out.add("requests")
    for name, feature in (("ephemeral-storage", "ephemeral-storage"), (HUGEPAGES, "hugepages"),
                          (RDMA, "extended-resource")):
        if name in requested:
            out.add(feature)
    if spec.get("initContainers"):
        out.add("init-containers")
    if spec.get("runtimeClassName") or spec.get("overhead"):
        out.add("overhead")
    if spec.get("hostNetwork"):
        out.add("host-network")
    if any(p.get("hostPort") for c in containers for p in c.get("ports") or ()):
        out.add("host-ports")
    if spec.get("nodeSelector"):
        out.add("node-selector")
    affinity = spec.get("affinity") or {}
    if (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
        out.add("node-affinity")
    if spec.get("tolerations"):
        out.add("tolerations")
    for kind, feature in (("podAffinity", "pod-affinity"), ("podAntiAffinity", "pod-anti-affinity")):
        terms = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        if terms:
            out.add(feature)
            if any(t.get("namespaces") for t in terms):
                out.add("affinity-namespaces")
    if any(c.get("whenUnsatisfiable") == "DoNotSchedule"
           for c in spec.get("topologySpreadConstraints") or ()):
        out.add("spread")
    for v in spec.get("volumes") or ():
        if {"gcePersistentDisk", "awsElasticBlockStore", "iscsi", "rbd"} & set(v):
            out.add("inline-disk")
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and "-csi-" in claim:
            out.add("claim-csi")
        elif claim:
            kind = claim_kind(claim)
            out.add({"unbound": "claim-unbound-immediate"}.get(kind, f"claim-{kind}"))
    return out
