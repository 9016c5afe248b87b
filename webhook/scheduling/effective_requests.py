"""A pod's requests as kube-scheduler of today counts them (upstream's `PodRequests`, in
component-helpers' resource/helpers.go): for cpu, memory and every other resource,

    app containers summed, each sidecar (an init container with `restartPolicy: Always`) added
    to them; each regular init container counts with the sidecars started before it, and the
    largest of those wins if larger; pod-level `spec.resources` (cpu, memory, hugepages-*)
    replace that sum for the resources it lists; the overhead is added last.

For a bound pod (`use_status`, in-place resize, GA 1.35) the containers count for the largest
of their spec, what the kubelet allocated (`allocatedResources`) and what it actuated
(`resources.requests`), resource by resource, from the pod's own status when it has both (1.36)
or else each container's; pod-level requests likewise; while the resize is Infeasible (the
pod's `PodResizePending` condition) the spec is left out. A pod waiting to be placed counts its
spec.

Plain dicts of whole numbers in (a `Reader` turns a ResourceList into them: cpu in millicores,
the rest in units) and out; resources.py makes its `Resources` of them. A field of the wrong
shape (a pod from a file) reads as absent here and is `requests_problem`'s reason.
"""

from __future__ import annotations

from typing import Callable, TypeAlias

from ..base.json_types import JsonObject
from ..base.shown import shown

ByName: TypeAlias = dict[str, int]
Reader: TypeAlias = Callable[[JsonObject], ByName]  # a ResourceList, every name it lists kept

SIDECAR_POLICY = "Always"
POD_LEVEL = ("cpu", "memory")  # with every hugepages-*: what pod-level resources may carry
HUGEPAGES = "hugepages-"
RESIZE_PENDING, INFEASIBLE = "PodResizePending", "Infeasible"


def is_sidecar(c: object) -> bool:
    return isinstance(c, dict) and c.get("restartPolicy") == SIDECAR_POLICY


def _mapping(obj: object, key: str) -> JsonObject | None:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else None


def _list(obj: JsonObject, key: str) -> list[object]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def counts_today(spec: JsonObject) -> bool:
    """Whether the spec has a field 1.20's sum did not read: a sidecar, pod-level resources.
    (Plain loops: every pod's reading asks, most have neither.)"""
    if spec.get("resources"):
        return True
    inits = spec.get("initContainers")
    if inits and isinstance(inits, list):
        for c in inits:
            if isinstance(c, dict) and c.get("restartPolicy") == SIDECAR_POLICY:
                return True
    return False


def status_counts(pod: JsonObject) -> bool:
    """Whether a bound pod's status may change what it counts for: a container status with
    allocated or actuated resources, or a resize condition."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return False
    if "allocatedResources" in status or "resources" in status:  # pod-level ones (1.36)
        return True
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if statuses and isinstance(statuses, list):
            for cs in statuses:
                if isinstance(cs, dict) and ("allocatedResources" in cs or "resources" in cs):
                    return True
    conditions = status.get("conditions")
    if conditions and isinstance(conditions, list):
        for c in conditions:
            if isinstance(c, dict) and c.get("type") == RESIZE_PENDING:
                return True
    return False


def spec_requests(c: JsonObject, read: Reader) -> ByName:
    """A container's requests, each resource it only limits defaulting to its limit (as the API
    server defaults a pod it stores; a pod from a file may not have been)."""
    res = _mapping(c, "resources")
    limits, requests = _mapping(res, "limits"), _mapping(res, "requests")
    if limits and requests:
        return read({**limits, **requests})
    return read(limits or requests or {})


def aggregate(spec: JsonObject, per_container: Callable[[JsonObject], ByName | None]) -> ByName:
    """The containers' part of PodRequests, for one reading of each container (None: it counts
    for nothing)."""
    total: ByName = {}
    for c in _list(spec, "containers"):
        if isinstance(c, dict):
            _add(total, per_container(c))
    sidecars: ByName = {}
    peak: ByName = {}
    for c in _list(spec, "initContainers"):
        if not isinstance(c, dict):
            continue
        own = per_container(c)
        if is_sidecar(c):
            _add(total, own)
            _add(sidecars, own)
            _max(peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, own)
            _max(peak, running)
    _max(total, peak)
    return total


def pod_requests_today(pod: JsonObject, read: Reader, use_status: bool = False) -> ByName:
    """PodRequests: the containers' part (with the status when `use_status`), pod-level
    resources, the overhead."""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    total = aggregate(spec, lambda c: spec_requests(c, read))
    if use_status and status_counts(pod):
        total = _with_status(pod, spec, read, total)
    pod_level = pod_level_requests(spec, read, total)
    if pod_level and use_status:
        pod_level = _pod_level_with_status(pod, spec, read, pod_level)
    if pod_level:
        total.update(pod_level)
    overhead = _mapping(spec, "overhead")
    if overhead:
        _add(total, read(overhead))
    return total


def is_pod_level(name: str) -> bool:
    return name in POD_LEVEL or name.startswith(HUGEPAGES)


def pod_level_requests(spec: JsonObject, read: Reader, containers: ByName) -> ByName:
    """The pod-level requests that replace the containers' sum: those `spec.resources.requests`
    lists of cpu, memory and hugepages, and, as the API server defaults them, for each of
    those the pod only limits, its limit (cpu and memory: unless the containers request it,
    when their sum stands). Other resources there are not pod-level ones and count for
    nothing."""
    res = _mapping(spec, "resources")
    if not res:
        return {}
    out = {n: v for n, v in read(_mapping(res, "requests") or {}).items() if is_pod_level(n)}
    for name, limit in read(_mapping(res, "limits") or {}).items():
        if is_pod_level(name) and name not in out and \
                (name.startswith(HUGEPAGES) or name not in containers):
            out[name] = limit
    return out


def resize_infeasible(pod: JsonObject) -> bool:
    """The kubelet said the pod's resize cannot be done on its node (the first PodResizePending
    condition's reason is Infeasible)."""
    status = pod.get("status")
    for c in _list(status, "conditions") if isinstance(status, dict) else ():
        if isinstance(c, dict) and c.get("type") == RESIZE_PENDING:
            return c.get("reason") == INFEASIBLE
    return False


def _with_status(pod: JsonObject, spec: JsonObject, read: Reader, spec_total: ByName) -> ByName:
    status = pod.get("status")
    statuses: dict[object, JsonObject] = {}
    for key in ("initContainerStatuses", "containerStatuses"):  # a container's own status wins
        for cs in _list(status, key) if isinstance(status, dict) else ():
            if isinstance(cs, dict):
                statuses[cs.get("name")] = cs
    infeasible = resize_infeasible(pod)
    total = {} if infeasible else dict(spec_total)
    # the pod-level status (InPlacePodLevelResourcesVerticalScaling, on from 1.36), when the
    # kubelet writes both: the containers' allocated and actuated sums already
    pod_allocated = _mapping(status, "allocatedResources")
    pod_actuated = _mapping(_mapping(status, "resources"), "requests")
    if pod_allocated is not None and pod_actuated is not None:
        _max(total, read(pod_allocated))
        _max(total, read(pod_actuated))
        return total

    def allocated(c: JsonObject) -> ByName | None:
        cs = statuses.get(c.get("name"))
        listed = _mapping(cs, "allocatedResources")
        if listed is not None:
            return read(listed)
        return None if infeasible else spec_requests(c, read)

    def actuated(c: JsonObject) -> ByName | None:
        cs = statuses.get(c.get("name"))
        listed = _mapping(_mapping(cs, "resources"), "requests")
        if listed is not None:
            return read(listed)
        return allocated(c)

    _max(total, aggregate(spec, allocated))
    _max(total, aggregate(spec, actuated))
    return total


def _pod_level_with_status(pod: JsonObject, spec: JsonObject, read: Reader,
                           pod_level: ByName) -> ByName:
    """Pod-level requests of a bound pod resized in place at the pod level (1.36): the largest
    of the spec's (left out while the resize is Infeasible) and the pod's actuated and
    allocated resources, the overhead taken out of those (it is added back once, last)."""
    status = pod.get("status")
    actuated = _mapping(_mapping(status, "resources"), "requests")
    allocated = _mapping(status, "allocatedResources")
    if actuated is None and allocated is None:
        return pod_level
    overhead = read(_mapping(spec, "overhead") or {})
    effective = {} if resize_infeasible(pod) else dict(pod_level)
    for listed in (actuated, allocated):
        if listed is not None:
            amounts = read(listed)
            for name, v in overhead.items():
                if name in amounts:
                    amounts[name] = max(amounts[name] - v, 0)
            _max(effective, amounts)
    return {n: v for n, v in effective.items() if is_pod_level(n)}


def _add(total: ByName, more: ByName | None) -> None:
    for name, v in (more or {}).items():
        total[name] = total.get(name, 0) + v


def _max(total: ByName, other: ByName) -> None:
    for name, v in other.items():
        if name not in total or v > total[name]:
            total[name] = v


def requests_problem(pod: JsonObject) -> str | None:
    """The field of the wrong shape among those the requests are read from, named; None when
    every one is of its kind (a pod the API server stored always is)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return None
    res = spec.get("resources")
    if res is not None:
        if not isinstance(res, dict):
            return f"spec.resources is not a mapping: {_short(res)}"
        for key in ("requests", "limits"):
            if res.get(key) is not None and not isinstance(res[key], dict):
                return f"spec.resources.{key} is not a mapping: {_short(res[key])}"
    for field in ("initContainers", "containers"):
        for i, c in enumerate(_list(spec, field)):
            if not isinstance(c, dict):
                continue
            policy = c.get("restartPolicy")
            if policy is not None and not isinstance(policy, str):
                return f"spec.{field}[{i}].restartPolicy is not a string: {_short(policy)}"
            cres = c.get("resources")
            if cres is not None and not isinstance(cres, dict):
                return f"spec.{field}[{i}].resources is not a mapping: {_short(cres)}"
            for key in ("requests", "limits"):
                if isinstance(cres, dict) and cres.get(key) is not None \
                        and not isinstance(cres[key], dict):
                    return f"spec.{field}[{i}].resources.{key} is not a mapping: {_short(cres[key])}"
    return None


def _short(value: object) -> str:
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a mapping"
    return shown(value)
