"""cpu / memory / pods, and the three Mthreads resources: what a pod requests and what a node
can still take, as kube-scheduler and the kubelet count them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias

from ..base.json_types import JsonObject
from .effective_requests import ByName, counts_today, pod_requests_today, status_counts
from .one_copy import one_copy
from .quantity import value

_OWN_FIELDS = ("cpu", "memory", "pods")

Amounts: TypeAlias = tuple[tuple[str, int], ...]  # (resource name, whole units), sorted by name


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_milli: int = 0
    memory_bytes: int = 0
    pods: int = 0
    # every other resource (ephemeral-storage, hugepages-*, extended resources such as an RDMA
    # device), in whole units (bytes for storage and hugepages); most pods and nodes have none.
    # The Mthreads resources are among them, but the cards and `Devices` count those.
    other: Amounts = ()

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes,
                         self.pods + other.pods, _combine(self.other, other.other, 1))

    def __sub__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes,
                         self.pods - other.pods, _combine(self.other, other.other, -1))

    def amount(self, name: str) -> int:
        for n, v in self.other:
            if n == name:
                return v
        return 0


def _combine(a: Amounts, b: Amounts, sign: int) -> Amounts:
    if not b:
        return a
    summed = dict(a)
    for name, v in b:
        summed[name] = summed.get(name, 0) + sign * v
    return tuple(sorted((n, v) for n, v in summed.items() if v))


def cpu_milli(raw: object) -> int:
    """A cpu quantity in millicores, rounded up (MilliValue); 0 if unreadable or not positive."""
    return _cpu_milli_text(raw) if type(raw) is str and len(raw) <= _KEPT else value(raw, True)


def whole_units(raw: object) -> int:
    """A positive quantity rounded up to whole units (bytes, or an extended resource's units); 0 else."""
    return _whole_units_text(raw) if type(raw) is str and len(raw) <= _KEPT else value(raw)


# The answers for the texts pods and nodes repeat ("250m", "1Gi"), kept: a pod's requests are
# read at each of its decisions and again when the watch shows it bound. A longer text is read
# each time (in linear time): kept, 4096 of them could hold gigabytes.
_KEPT = 64


@lru_cache(maxsize=4096)
def _cpu_milli_text(raw: str) -> int:
    return value(raw, True)


@lru_cache(maxsize=4096)
def _whole_units_text(raw: str) -> int:
    return value(raw)


memory_bytes = whole_units


def _container_requests(c: JsonObject) -> tuple[int, int, Amounts]:
    """(cpu millicores, memory bytes, the other resources) a container requests."""
    res = c.get("resources") if isinstance(c, dict) else None
    res = res if isinstance(res, dict) else {}  # of the wrong shape: feasible.py's reason
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    req, lim = req if isinstance(req, dict) else {}, lim if isinstance(lim, dict) else {}
    # kube-apiserver copies limits into missing requests; do the same for pods read before defaulting
    return (cpu_milli(req.get("cpu", lim.get("cpu"))), memory_bytes(req.get("memory", lim.get("memory"))),
            _amounts({**lim, **req}) if len(req) + len(lim) > 0 else ())


def _amounts(listed: JsonObject) -> Amounts:
    return tuple(sorted((n, v) for n, raw in listed.items()
                        if n not in _OWN_FIELDS and (v := whole_units(raw))))


def pod_requests(pod: JsonObject, use_status: bool = False) -> Resources:
    """What the pod counts for on a node, and one pod slot, as kube-scheduler's NodeResourcesFit
    counts them: a pod with sidecars or pod-level resources, or (`use_status`: a bound pod) a
    status the kubelet resized, as upstream's PodRequests (effective_requests.py); any other
    as 1.20 did, max(sum of app containers, max of init containers) + overhead, the same
    answer for it, summed in plain numbers: a Resources per step cost a third of the call,
    which every decision makes."""
    spec = pod.get("spec") or {}
    if counts_today(spec) or (use_status and status_counts(pod)):
        return _resources_of(pod_requests_today(pod, _read_all, use_status))
    cpu, memory = 0, 0
    other: dict[str, int] = {}
    for c in spec.get("containers") or ():
        c_cpu, c_memory, c_other = _container_requests(c)
        cpu, memory = cpu + c_cpu, memory + c_memory
        for name, v in c_other:
            other[name] = other.get(name, 0) + v
    for c in spec.get("initContainers") or ():
        c_cpu, c_memory, c_other = _container_requests(c)
        cpu, memory = max(cpu, c_cpu), max(memory, c_memory)
        for name, v in c_other:
            other[name] = max(other.get(name, 0), v)
    overhead = spec.get("overhead")
    if overhead:
        for name, v in _amounts(overhead):
            other[name] = other.get(name, 0) + v
        cpu, memory = cpu + cpu_milli(overhead.get("cpu")), memory + memory_bytes(overhead.get("memory"))
    return one_copy(Resources(cpu, memory, 1, tuple(sorted(other.items())) if other else ()))


def _read_all(listed: JsonObject) -> ByName:
    """A ResourceList as effective_requests.py reads it: every name it lists, cpu in millicores."""
    return {n: cpu_milli(raw) if n == "cpu" else whole_units(raw) for n, raw in listed.items()
            if isinstance(n, str)}


def _resources_of(amounts: ByName) -> Resources:
    cpu, memory = amounts.pop("cpu", 0), amounts.pop("memory", 0)
    other = tuple(sorted((n, v) for n, v in amounts.items() if v and n not in _OWN_FIELDS))
    return one_copy(Resources(cpu, memory, 1, other))


def node_allocatable(node: JsonObject) -> Resources:
    """What kube-scheduler counts the pods against: `status.allocatable` alone, a resource it
    does not list (the pod count too) being 0, as kube-scheduler 1.20 reads it."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return Resources(cpu_milli(alloc.get("cpu")), memory_bytes(alloc.get("memory")),
                     _whole_or_zero(alloc.get("pods")),
                     tuple(sorted((n, _whole_or_zero(raw)) for n, raw in alloc.items()
                                  if n not in _OWN_FIELDS)))


@dataclass(frozen=True, slots=True)
class Devices:
    """Amounts of the three Mthreads resources (count, memory units, cores), in the order of
    `pods.resource_names`."""

    count: int = 0
    memory: int = 0
    cores: int = 0

    def __add__(self, other: "Devices") -> "Devices":
        return Devices(self.count + other.count, self.memory + other.memory, self.cores + other.cores)

    def __sub__(self, other: "Devices") -> "Devices":
        return Devices(self.count - other.count, self.memory - other.memory, self.cores - other.cores)

    def __iter__(self) -> Iterator[int]:
        return iter((self.count, self.memory, self.cores))


NO_DEVICES = Devices()


def _container_devices(c: JsonObject, names: tuple[str, str, str]) -> tuple[int, ...]:
    res = c.get("resources") if isinstance(c, dict) else None
    res = res if isinstance(res, dict) else {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    # an extended resource's request defaults to its limit
    req, lim = req if isinstance(req, dict) else {}, lim if isinstance(lim, dict) else {}
    return tuple(whole_units(req.get(n, lim.get(n))) for n in names)


def device_requests(pod: JsonObject, names: tuple[str, str, str]) -> Devices:
    """The pod's requests of the three resources as the kubelet admits a pod, by upstream's
    PodRequests: sidecars added to the app containers, each regular init container with the
    sidecars before it (effective_requests.py); without sidecars, max(sum of app containers,
    max of init containers) + overhead, each resource on its own. Pod-level resources never
    carry these (extended resources are not pod-level ones), and a resize never changes them
    (only cpu and memory resize): the spec is what the kubelet admits."""
    spec = pod.get("spec") or {}
    if counts_today(spec):
        def read(listed: JsonObject) -> ByName:
            return {n: whole_units(listed[n]) for n in names if n in listed}
        amounts = pod_requests_today(pod, read)
        return one_copy(Devices(*(amounts.get(n, 0) for n in names)))
    app = [0, 0, 0]
    for c in spec.get("containers") or ():
        for i, v in enumerate(_container_devices(c, names)):
            app[i] += v
    for c in spec.get("initContainers") or ():
        for i, v in enumerate(_container_devices(c, names)):
            app[i] = max(app[i], v)
    overhead = spec.get("overhead") or {}
    return one_copy(Devices(*(a + whole_units(overhead.get(n)) for a, n in zip(app, names))))


# (count, memory, cores): int, or None where allocatable does not list it
DeviceLimits: TypeAlias = tuple[int | None, ...]


def device_allocatable(node: JsonObject, names: tuple[str, str, str]) -> DeviceLimits:
    """What the kubelet admits of each resource: the node's allocatable (capacity when the
    node reports no allocatable at all). A resource allocatable does not list is None: the
    kubelet drops a request of an extended resource the node does not list, so it bounds
    nothing (the cards, from capacity, still do)."""
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    return tuple(None if n not in alloc else _whole_or_zero(alloc[n]) for n in names)


def _whole_or_zero(raw: object) -> int:
    """An allocatable amount, rounded down (the kubelet compares whole units); 0 if unreadable."""
    return value(raw, round_up=False)
