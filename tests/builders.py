"""Pods, nodes and AdmissionReviews as the API server sends them, for tests: the admission
side's (`container`, `pod`, the reviews) and the scheduling side's (`mt_node`, `slice_`,
`whole`, `plain`, `sched_pod`, `bound_slice`: pods the way the webhook mutates them, with
uids)."""

from __future__ import annotations

import copy
import itertools
import uuid

COUNT, MEMORY, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"

# What the allocator writes on a pod it binds to node-1's card 0 (SPEC 4).
ALLOCATED = {
    "hami.io/mthreads-vgpu-devices-allocated": "node-1-mthreads-0,Mthreads,16384,8:;",
    "mthreads.com/gpu-index": "0",
    "mthreads.com/predicate-node": "node-1",
    "hami.io/vgpu-node": "node-1",
    "mthreads.com/predicate-time": "1767225600000000000",
    "hami.io/vgpu-time": "1767225600",
    "hami.io/bind-time": "1767225600",
    "hami.io/bind-phase": "allocating",
}


def container(name: str = "main", count=None, memory=None, cores=None, *, requests_only=False,
              extra: dict | None = None, privileged: bool | None = None) -> dict:
    res = {k: str(v) if isinstance(v, int) else v
           for k, v in ((COUNT, count), (MEMORY, memory), (CORE, cores)) if v is not None}
    res.update(extra or {})
    c: dict = {"name": name, "image": "busybox:1.36"}
    if res:
        c["resources"] = {"requests": res} if requests_only else {"limits": res, "requests": dict(res)}
    if privileged is not None:
        c["securityContext"] = {"privileged": privileged}
    return c


def pod(*containers: dict, init: tuple[dict, ...] = (), annotations: dict | None = None,
        scheduler: str | None = None, node: str | None = None, name: str = "p") -> dict:
    spec: dict = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeName"] = node
    meta: dict = {"name": name, "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review(obj: dict | None, operation: str = "CREATE", old: dict | None = None,
           user: str = "alice", version: str = "admission.k8s.io/v1",
           sub_resource: str | None = None, kind: str = "Pod", resource: str = "pods") -> dict:
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": kind},
           "resource": {"group": "", "version": "v1", "resource": resource},
           "operation": operation, "userInfo": {"username": user}}
    if user.startswith("system:node:"):  # a kubelet's credentials carry its group too
        req["userInfo"]["groups"] = ["system:nodes", "system:authenticated"]
    if sub_resource is not None:
        req["subResource"] = sub_resource
    if obj is not None:
        req["object"] = copy.deepcopy(obj)
    if old is not None:
        req["oldObject"] = copy.deepcopy(old)
    return {"apiVersion": version, "kind": "AdmissionReview", "request": req}


def binding(name: str = "p", annotations: dict | None = None, node: str = "node-1") -> dict:
    """A Binding as a scheduler posts it to pods/<name>/binding."""
    meta: dict = {"name": name, "namespace": "default"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def binding_review(obj: dict, user: str = "alice", legacy: bool = False, **kw) -> dict:
    """The review of a pods/binding CREATE (or of the legacy `bindings` resource), as the
    API server sends it: kind Binding, no oldObject."""
    if legacy:
        return review(obj, "CREATE", user=user, kind="Binding", resource="bindings", **kw)
    return review(obj, "CREATE", user=user, kind="Binding", sub_resource="binding", **kw)


def status_review(old: dict, new: dict, user: str = "system:node:node-1", **kw) -> dict:
    """The review of a pods/status UPDATE: kind Pod, both objects Pods."""
    return review(new, "UPDATE", old, user=user, sub_resource="status", **kw)


# --- the scheduling side: nodes with Mthreads cards, and pods as the webhook mutated them ---

SCHEDULER = "hami-scheduler"
_n = itertools.count()


def mt_node(name: str, cards: int = 2, units: int = 96, *, ready: bool = True, cpu: str = "32",
            memory: str = "128Gi", pods: str = "110", labels: dict | None = None,
            taints: list | None = None, unschedulable: bool = False, capacity: dict | None = None,
            allocatable: dict | None = None, annotations: dict | None = None) -> dict:
    """`allocatable`: keys that differ from capacity (None as a value: not listed at all);
    `annotations`: the node's (a card cordon, its limit of containers per card)."""
    res = {"cpu": cpu, "memory": memory, "pods": pods}
    if cards:
        res.update({"mthreads.com/sgpu-core": str(16 * cards),
                    "mthreads.com/sgpu-memory": str(units * cards)})
    if capacity is not None:
        res = capacity
    alloc = {k: v for k, v in {**res, **(allocatable or {})}.items() if v is not None}
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": dict(annotations or {})},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"capacity": res, "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def slice_(memory: int, cores: int | None = None, name: str | None = None, cpu: str | None = None) -> dict:
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": str(memory)}
    if cores is not None:
        limits["mthreads.com/sgpu-core"] = str(cores)
    c = {"name": name or f"c{next(_n)}", "image": "busybox", "resources": {"limits": limits, "requests": dict(limits)}}
    if cpu:
        c["resources"]["requests"]["cpu"] = cpu
    return c


def whole(count: int, units: int = 96, name: str | None = None) -> dict:
    """The form the webhook writes for a container that asked for `count` cards."""
    limits = {"mthreads.com/vgpu": str(count), "mthreads.com/sgpu-memory": str(count * units),
              "mthreads.com/sgpu-core": str(16 * count)}
    return {"name": name or f"c{next(_n)}", "image": "busybox",
            "resources": {"limits": limits, "requests": dict(limits)}}


def plain(name: str | None = None, cpu: str | None = None, memory: str | None = None) -> dict:
    req = {}
    if cpu:
        req["cpu"] = cpu
    if memory:
        req["memory"] = memory
    return {"name": name or f"c{next(_n)}", "image": "busybox", "resources": {"requests": req}}


def sched_pod(*containers: dict, init: tuple = (), name: str | None = None, namespace: str = "default",
        annotations: dict | None = None, node: str | None = None, spec: dict | None = None,
        uid: str | None = None, phase: str = "Pending") -> dict:
    name = name or f"p{next(_n)}"
    s = {"schedulerName": SCHEDULER, "containers": list(containers) or [plain()],
         "tolerations": [], **(spec or {})}
    if init:
        s["initContainers"] = list(init)
    if node:
        s["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4()),
                         "annotations": dict(annotations or {})},
            "spec": s, "status": {"phase": phase}}


def bound_slice(name: str, node: str, allocated: str, namespace: str = "team",
                phase: str = "Running") -> dict:
    """A running pod of a small slice, bound to `node` with the given allocation annotation."""
    return sched_pod(slice_(2), name=name, namespace=namespace, node=node, phase=phase,
                     annotations={"hami.io/mthreads-vgpu-devices-allocated": allocated})


def ephemeral_update(p: dict, debug: dict, legacy: bool = False) -> dict:
    """The review kubectl debug makes: on 1.22+ the Pod, on 1.16-1.21 an EphemeralContainers
    object (the pod's metadata and its ephemeral containers)."""
    if legacy:
        old = {"apiVersion": "v1", "kind": "EphemeralContainers", "metadata": p["metadata"],
               "ephemeralContainers": []}
        new = {**old, "ephemeralContainers": [debug]}
        return review(new, "UPDATE", old, sub_resource="ephemeralcontainers",
                      kind="EphemeralContainers")
    new = copy.deepcopy(p)
    new["spec"]["ephemeralContainers"] = [debug]
    return review(new, "UPDATE", p, sub_resource="ephemeralcontainers")


# The fields an object's parts are read by (a container's resources, a node's status, any
# object's metadata): a Raising part raises on each of them.
_READ_FIELDS = ("requests", "limits", "claims",
                "allocatable", "capacity", "conditions", "images", "nodeInfo", "addresses",
                "volumesAttached", "volumesInUse", "phase",
                "name", "namespace", "uid", "annotations", "labels", "deletionTimestamp",
                "ownerReferences", "resourceVersion", "generateName", "creationTimestamp",
                "finalizers")


class _Unreadable:
    """A key that stands where `field` would and raises when compared with it: compiled code
    (mypyc) reads a dict subclass's storage directly, past its methods, and a lookup of
    `field` compares the stored key of the same hash."""

    def __init__(self, field: str) -> None:
        self.field, self._hash = field, hash(field)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("injected failure")

    def __repr__(self) -> str:
        return f"<unreadable {self.field}>"


class Raising(dict):
    """A part of an object that raises whenever it is read (issue 46: an object whose
    decision or indexing raises, without depending on any one parser's bug), by its methods
    (interpreted code) or by its storage (compiled code)."""

    def __init__(self) -> None:
        super().__init__((_Unreadable(f), None) for f in _READ_FIELDS)

    def _raise(self, *args, **kwargs):
        raise RuntimeError("injected failure")

    __getitem__ = get = items = keys = values = __iter__ = __contains__ = _raise

    def __bool__(self) -> bool:  # not an empty dict: `x or {}` reads it
        return True

    def __deepcopy__(self, memo) -> "Raising":
        return Raising()


def raising(obj: dict, part: str = "resources") -> dict:
    """A copy of a pod or node that raises when `part` is read: "resources" (a pod's first
    container's), "status" (a node's), "metadata" (any: not even its name reads)."""
    out = copy.deepcopy(obj)
    if part == "resources":
        out["spec"]["containers"][0]["resources"] = Raising()
    else:
        out[part] = Raising()
    return out


def spread_constraint(max_skew: int, key: str, selector: dict | None, *,
                      when: str = "DoNotSchedule", min_domains: int | None = None,
                      affinity_policy: str | None = None, taints_policy: str | None = None,
                      label_keys: list[str] | None = None) -> dict:
    """One of a pod's `topologySpreadConstraints`, the fields left out when None (as upstream's
    test pods write them: `SpreadConstraint(maxSkew, key, when, selector, minDomains,
    nodeAffinityPolicy, nodeTaintsPolicy, matchLabelKeys)`)."""
    c = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    for name, value in (("labelSelector", selector), ("minDomains", min_domains),
                        ("nodeAffinityPolicy", affinity_policy),
                        ("nodeTaintsPolicy", taints_policy), ("matchLabelKeys", label_keys)):
        if value is not None:
            c[name] = value
    return c


def requesting(name: str, cpu: str | None = None, memory: str | None = None, *,
               other: dict | None = None, limits: dict | None = None, sidecar: bool = False,
               ports: list | None = None) -> dict:
    """A container requesting `cpu`, `memory` and `other` resources, limiting `limits`;
    `sidecar`: an init container's `restartPolicy: Always`, as upstream's helpers_test.go writes
    its sidecars."""
    req = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    req.update(other or {})
    res: dict = {}
    if req:
        res["requests"] = req
    if limits:
        res["limits"] = dict(limits)
    c: dict = {"name": name, "image": "busybox", "resources": res}
    if sidecar:
        c["restartPolicy"] = "Always"
    if ports:
        c["ports"] = list(ports)
    return c


def pod_requesting(*containers: dict, init: tuple = (), resources: dict | None = None,
                   overhead: dict | None = None, status: dict | None = None,
                   name: str = "p", node: str | None = None) -> dict:
    """A whole Pod (apiVersion and kind: tests.harness.schema.valid_at checks it) of these
    containers, pod-level `resources`, `overhead` and `status`."""
    spec: dict = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if resources is not None:
        spec["resources"] = resources
    if overhead is not None:
        spec["overhead"] = overhead
    if node:
        spec["nodeName"] = node
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec}
    if status is not None:
        pod["status"] = status
    return pod


def container_status(name: str, allocated: dict | None = None, actual: dict | None = None) -> dict:
    """A running container's status with what the kubelet allocated (`allocatedResources`) and
    actuated (`resources.requests`), each left out when None (in-place resize, 1.35)."""
    cs: dict = {"name": name, "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
                "state": {"running": {}}}
    if allocated is not None:
        cs["allocatedResources"] = dict(allocated)
    if actual is not None:
        cs["resources"] = {"requests": dict(actual)}
    return cs


def resize_pending(reason: str) -> dict:
    """The PodResizePending condition the kubelet writes: reason Deferred or Infeasible."""
    return {"type": "PodResizePending", "status": "True", "reason": reason}


def nominated(p: dict, node: str, priority: int | None = None) -> dict:
    """`p` as a preemption leaves it: not bound, `status.nominatedNodeName` naming `node`
    (1.20 serves the field); `priority`: its spec.priority."""
    if priority is not None:
        p["spec"]["priority"] = priority
    p["status"] = {**p.get("status", {}), "nominatedNodeName": node}
    return p


# CSI volumes and their nodes' attach limits (kube-scheduler's NodeVolumeLimits)
CSI_DRIVER = "csi.example.com"


def csinode(node: str, counts: dict | None = None, migrated: str | None = None) -> dict:
    """The CSINode of `node`: each driver of `counts` with its attach limit (None: it reports
    none); `migrated`: the in-tree plugins its CSI drivers run (comma-separated)."""
    meta: dict = {"name": node}
    if migrated is not None:
        meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": migrated}
    drivers = [{"name": d, "nodeID": node,
                **({} if n is None else {"allocatable": {"count": n}})}
               for d, n in (counts or {}).items()]
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta,
            "spec": {"drivers": drivers}}


def csi_volume(name: str, driver: str = CSI_DRIVER, handle: str | None = None,
               claim: tuple[str, str] | None = None) -> dict:
    """A PersistentVolume of a CSI driver (`handle`: its volume id, the name by default);
    `claim`: the (namespace, name) it is bound to."""
    spec: dict = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                  "persistentVolumeReclaimPolicy": "Retain",
                  "csi": {"driver": driver, "volumeHandle": handle or name}}
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": spec}
