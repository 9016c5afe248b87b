"""cpu / memory / pods: what a pod requests and what a node can still take, as kube-scheduler counts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": Decimal("0.001"),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


@dataclass(frozen=True)
class Resources:
    cpu_milli: int = 0
    memory_bytes: int = 0
    pods: int = 0

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes,
                         self.pods + other.pods)

    def __sub__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu_milli - other.cpu_milli, self.memory_bytes - other.memory_bytes,
                         self.pods - other.pods)


def quantity(raw) -> Decimal | None:
    """A Kubernetes quantity ("100m", "1.5", "2Gi", "1e3") as a number; None if unreadable."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return Decimal(str(raw))
    if not isinstance(raw, str):
        return None
    m = _QUANTITY.match(raw.strip())
    if not m:
        return None
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    except InvalidOperation:
        return None


def _ceil(d: Decimal) -> int:
    return int(-((-d) // 1))


def cpu_milli(raw) -> int:
    q = quantity(raw)
    return _ceil(q * 1000) if q is not None and q > 0 else 0


def memory_bytes(raw) -> int:
    q = quantity(raw)
    return _ceil(q) if q is not None and q > 0 else 0


def _container_requests(c: dict) -> Resources:
    res = c.get("resources") if isinstance(c, dict) else None
    req = (res or {}).get("requests") or {}
    # kube-apiserver copies limits into missing requests; do the same for pods read before defaulting
    lim = (res or {}).get("limits") or {}
    return Resources(cpu_milli(req.get("cpu", lim.get("cpu"))),
                     memory_bytes(req.get("memory", lim.get("memory"))))


def pod_requests(pod: dict) -> Resources:
    """max(sum of app containers, max of init containers) + overhead, and one pod slot."""
    spec = pod.get("spec") or {}
    app = Resources()
    for c in spec.get("containers") or ():
        app = app + _container_requests(c)
    cpu, memory = app.cpu_milli, app.memory_bytes
    for c in spec.get("initContainers") or ():
        r = _container_requests(c)
        cpu, memory = max(cpu, r.cpu_milli), max(memory, r.memory_bytes)
    overhead = spec.get("overhead") or {}
    return Resources(cpu + cpu_milli(overhead.get("cpu")),
                     memory + memory_bytes(overhead.get("memory")), 1)


def node_allocatable(node: dict) -> Resources:
    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    pods = quantity(alloc.get("pods"))
    return Resources(cpu_milli(alloc.get("cpu")), memory_bytes(alloc.get("memory")),
                     int(pods) if pods is not None else 110)
