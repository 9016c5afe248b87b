"""Small clusters for the tables of kube-scheduler's filters (tests/scheduling/test_feasible.py
and its neighbours): nodes with labels, pods with labels, ports, affinity, spread and claims,
read into a SchedulerCache as the watches deliver them."""

from __future__ import annotations

from webhook.model.config import MthreadsConfig
from webhook.scheduling.cache import STORAGE_KINDS, SchedulerCache
from webhook.scheduling.feasible import node_reasons

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str | None = "z1", cpu: str = "4", pods: str = "110", **extra) -> dict:
    labels = {HOST: name, **({ZONE: zone} if zone is not None else {})}
    labels.update(extra.pop("labels", {}))
    alloc = {"cpu": cpu, "memory": "8Gi", "pods": pods, **extra.pop("allocatable", {})}
    return {"metadata": {"name": name, "labels": labels},
            "spec": extra.pop("spec", {}),
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": alloc, "capacity": alloc}}


def pod(name: str, on: str | None = None, labels: dict | None = None, ns: str = "a",
        requests: dict | None = None, ports: list | None = None, **spec) -> dict:
    c = {"name": "c", "resources": {"requests": requests or {"cpu": "100m"}}}
    if ports:
        c["ports"] = ports
    s = {"containers": [c], **spec}
    if on:
        s["nodeName"] = on
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}",
                         "labels": labels or {}},
            "spec": s, "status": {"phase": "Running" if on else "Pending"}}


def term(key: str = HOST, ns: list | None = None, **match) -> dict:
    t = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    if ns is not None:
        t["namespaces"] = ns
    return t


def affinity(kind: str, *terms: dict) -> dict:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}}


def cache_of(nodes: list, pods: list = (), claims: list = (), volumes: list = (),
             classes: list = (), csinodes: list = ()) -> SchedulerCache:
    c = SchedulerCache(MthreadsConfig(), kinds=("node", "pod") + STORAGE_KINDS)
    c.apply("node", "RESET", list(nodes))
    c.apply("pod", "RESET", list(pods))
    for kind, objs in zip(STORAGE_KINDS, (claims, volumes, classes, csinodes)):
        c.apply(kind, "RESET", list(objs))
    return c


def reasons_for(p: dict, c: SchedulerCache) -> dict:
    return c.read(lambda state: node_reasons(p, state))


def passing(p: dict, c: SchedulerCache) -> set:
    return {n for n, r in reasons_for(p, c).items() if r is None}
