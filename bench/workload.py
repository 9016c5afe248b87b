"""Nodes and pods for the allocator benchmarks (bench/allocator.py, bench/e2e.py).

Nodes are what a Mthreads device plugin and a kubelet report: 8 cards, MTT S4000 (96 units a
card) and MTT S5000 (160) alternating, `status.capacity` with `mthreads.com/sgpu-core` = 16 x 8
and `mthreads.com/sgpu-memory` = units x 8, Ready, allocatable cpu/memory/pods.

Pods are in the form the webhook writes (schedulerName `hami-scheduler`, the Mthreads resources
in limits and requests): mostly slices of one card of mixed sizes, some with cores, and a few
pods that take whole cards (the whole form: vgpu N, sgpu-memory N x units, sgpu-core 16 x N).
The mix is drawn from a seeded generator, so every run places the same pods.
"""

from __future__ import annotations

import random
import uuid

CARDS = 8
MODELS = (96, 160)  # S4000, S5000: nodes alternate
NODE_CPU, NODE_MEMORY, NODE_PODS = "64", "512Gi", "110"
SCHEDULER = "hami-scheduler"
MEMORY_PER_CARD = (96, 160)
# sgpu-memory of a slice (512 MiB units; valid on both models), sgpu-core (None: no cores)
SLICE_MEMORY = (2, 4, 4, 8, 8, 16, 32)
SLICE_CORES = (None, None, 1, 2, 4)
WHOLE_SHARE = 0.04  # share of pods that take whole cards (1 or 2)
POD_CPU = ("100m", "250m", "500m")
POD_MEMORY = ("256Mi", "512Mi", "1Gi")


def node_name(i: int) -> str:
    return f"bench-node-{i:05d}"


def node(i: int, heartbeat: str = "2024-01-01T00:00:00Z") -> dict:
    units = MODELS[i % len(MODELS)]
    res = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS,
           "mthreads.com/sgpu-core": str(16 * CARDS),
           "mthreads.com/sgpu-memory": str(units * CARDS)}
    name = node_name(i)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.UUID(int=i + 1)),
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64"}},
            "spec": {},
            "status": {"capacity": dict(res), "allocatable": dict(res),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "lastHeartbeatTime": heartbeat,
                                       "lastTransitionTime": heartbeat}]}}


def shapes(count: int, seed: int = 5) -> list[dict]:
    """`count` pod shapes: {"kind": "slice"|"whole", memory/cores or cards/units, cpu, memory}."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        cpu, mem = rng.choice(POD_CPU), rng.choice(POD_MEMORY)
        if rng.random() < WHOLE_SHARE:
            out.append({"kind": "whole", "cards": rng.choice((1, 1, 2)), "units": rng.choice(MODELS),
                        "cpu": cpu, "memory": mem})
        else:
            out.append({"kind": "slice", "gpu_memory": rng.choice(SLICE_MEMORY),
                        "cores": rng.choice(SLICE_CORES), "cpu": cpu, "memory": mem})
    return out


def mthreads_limits(shape: dict) -> dict:
    if shape["kind"] == "whole":
        n = shape["cards"]
        return {"mthreads.com/vgpu": str(n), "mthreads.com/sgpu-memory": str(n * shape["units"]),
                "mthreads.com/sgpu-core": str(16 * n)}
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": str(shape["gpu_memory"])}
    if shape["cores"] is not None:
        limits["mthreads.com/sgpu-core"] = str(shape["cores"])
    return limits


MTHREADS, EXTENDED = "mthreads", "extended"  # the forms of pod()

ZONE = "topology.kubernetes.io/zone"
ZONES = 4  # node i is in zone z<(i // 2) % ZONES>: both models in every zone
GROUP = 8  # replicas of one constrained group
CONSTRAINED_EVERY = 3  # every third pod of a constrained run: a sidecar, anti-affinity and spread


def zone(i: int) -> str:
    # nodes alternate models (i % 2): a zone of every other node would hold one model only,
    # and a group spread over the zones could not place a pod that needs the other model
    return f"z{(i // 2) % ZONES}"


# The label of the bench's namespaces that the constrained pods' anti-affinity selects them by
NAMESPACE_LABEL = ("mthreads.bench/pods", "true")


def constrain(body: dict, i: int) -> dict:
    """Every `CONSTRAINED_EVERY`th pod becomes a replica of a group of `GROUP`, in the shape of
    an inference Deployment of today: a sidecar (an init container with `restartPolicy:
    Always`), required anti-affinity against its group on the node (one replica a node) in the
    namespaces its `namespaceSelector` selects, and a DoNotSchedule spread over the zones with
    maxSkew 1 and `minDomains` the zone count. A 1.20 API server prunes the newer fields (the
    sidecar becomes a plain init container; the term's namespaces, the pod's own), so on it the
    row measures what both schedulers make of the shape."""
    if i % CONSTRAINED_EVERY:
        return body
    group = f"g{i // CONSTRAINED_EVERY // GROUP}"
    body["metadata"]["labels"] = {**body["metadata"]["labels"], "group": group}
    selector = {"matchLabels": {"group": group}}
    key, value = NAMESPACE_LABEL
    body["spec"]["initContainers"] = [
        {"name": "proxy", "image": "busybox", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]
    body["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "namespaceSelector": {"matchLabels": {key: value}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    body["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
         "minDomains": ZONES, "labelSelector": selector}]
    return body


def extended_limits(shape: dict) -> dict:
    """The same memory and cores as plain extended resources, which kube-scheduler checks
    against the node's allocatable totals by itself (the nodes report no mthreads.com/vgpu)."""
    return {k: v for k, v in mthreads_limits(shape).items() if k != "mthreads.com/vgpu"}


def pod(shape: dict, name: str, namespace: str = "bench", *, form: str = MTHREADS,
        scheduler: str = SCHEDULER, uid: str | None = None) -> dict:
    """A pod as created (no uid unless given): the allocator's form (`MTHREADS`), or for
    kube-scheduler alone the same requests with the card's memory and cores as plain
    extended resources (`EXTENDED`)."""
    requests = {"cpu": shape["cpu"], "memory": shape["memory"]}
    limits = mthreads_limits(shape) if form == MTHREADS else extended_limits(shape)
    requests = {**requests, **limits}
    resources = {"requests": requests}
    if limits:
        resources["limits"] = limits
    meta: dict = {"name": name, "namespace": namespace, "labels": {"app": "bench"}}
    if uid:
        meta["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": resources}]},
            "status": {"phase": "Pending"}}
