"""Pods and nodes as the API server would return them, built the way the webhook mutates pods."""

from __future__ import annotations

import itertools
import uuid

SCHEDULER = "hami-scheduler"
_n = itertools.count()


def mt_node(name: str, cards: int = 2, units: int = 96, *, ready: bool = True, cpu: str = "32",
            memory: str = "128Gi", pods: str = "110", labels: dict | None = None,
            taints: list | None = None, unschedulable: bool = False, capacity: dict | None = None) -> dict:
    res = {"cpu": cpu, "memory": memory, "pods": pods}
    if cards:
        res.update({"mthreads.com/sgpu-core": str(16 * cards),
                    "mthreads.com/sgpu-memory": str(units * cards)})
    if capacity is not None:
        res = capacity
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"capacity": res, "allocatable": res,
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


def pod(*containers: dict, init: tuple = (), name: str | None = None, namespace: str = "default",
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
