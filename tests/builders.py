"""Pods and AdmissionReviews as the API server sends them, for tests."""

from __future__ import annotations

import copy
import uuid

COUNT, MEMORY, CORE = "mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


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
           user: str = "alice", version: str = "admission.k8s.io/v1") -> dict:
    req = {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "operation": operation, "userInfo": {"username": user}}
    if obj is not None:
        req["object"] = copy.deepcopy(obj)
    if old is not None:
        req["oldObject"] = copy.deepcopy(old)
    return {"apiVersion": version, "kind": "AdmissionReview", "request": req}
