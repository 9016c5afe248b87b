"""The pods waiting for the allocator, in the order it decides them and with a backoff each
(after kube-scheduler's internal/queue).

Order: higher `spec.priority` first, then the older pod (name breaks ties). A pod that did not
fit waits `backoff_seconds` before it is decided again, 1 s doubling to 10 s, whatever changes
meanwhile; after that it is tried again when the cluster has changed (the state's generation)
or at the latest every `RETRY_BACKSTOP`. So a pod that is costly to decide and never fits takes
the decision thread for one decision every 10 s at most, not one per cluster change.

An update of the pod never shortens its backoff, as in kube-scheduler (an updated pod that is
backing off goes back to its backoff queue, its attempts kept): else whoever may patch the pod
gets a decision per patch. An update that may make it fit (`may_fit_now`: its scheduling
fields, its labels, the annotations a decision reads) counts as a change of the cluster: the
pod is tried when its backoff ends. Any other update (status, other annotations, an image) only
replaces the pod kept. A pod whose binding could not be written is tried again after
`ERROR_RETRY`.

Plain data, no lock: the allocator's decision thread owns it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from ..base.json_types import JsonObject
from ..model import annotations as keys
from .pod_status import name_of, scheduling_gates, uid_of
from .priority import pod_priority

RETRY_BACKSTOP = 30.0  # retry an unschedulable pod at least this often even if nothing changed
ERROR_RETRY = 2.0  # after a failed write
# kube-scheduler's podInitialBackoffSeconds and podMaxBackoffSeconds
POD_INITIAL_BACKOFF = 1.0
POD_MAX_BACKOFF = 10.0


def queue_order(pod: JsonObject) -> tuple[int, str, str]:
    """kube-scheduler's queue order: higher `spec.priority` first, then the older pod (name
    breaks ties). No preemption here: a pod that fits nowhere waits (docs/allocator.md)."""
    return (-pod_priority(pod), pod["metadata"].get("creationTimestamp") or "", name_of(pod))


def backoff_seconds(failures: int, initial: float, maximum: float) -> float:
    """How long a pod waits after `failures` tries in a row that placed nothing: `initial`
    after the first, doubling, at most `maximum` (kube-scheduler's arithmetic)."""
    if failures < 1 or initial <= 0:
        return 0.0
    return max(0.0, min(initial * 2.0 ** min(failures - 1, 60), maximum))


@dataclass(frozen=True)
class LastTry:
    generation: int | None  # the state's generation it did not fit at; None: a write failed
    at: float  # monotonic
    failures: int = 0  # tries in a row that placed nothing (0 after a failed write)
    backoff: float = 0.0  # seconds from `at` before it is tried again, whatever changes
    pod_changed: bool = False  # updated since, in a way that may make it fit

    def due(self, generation: int, now: float) -> bool:
        if self.generation is None:  # back off a little
            return now - self.at >= ERROR_RETRY
        if now - self.at < self.backoff:
            return False
        return self.pod_changed or self.generation != generation or now - self.at >= RETRY_BACKSTOP


def failed_try(last: LastTry | None, generation: int, now: float, initial: float,
               maximum: float) -> LastTry:
    """The record after one more try that placed nothing (`last`: the one before, if any)."""
    failures = (last.failures if last is not None else 0) + 1
    return LastTry(generation, now, failures, backoff_seconds(failures, initial, maximum))


# Fields of a pending pod's spec that the API server lets anyone who may patch the pod change,
# and that no scheduling rule reads.
_NOT_SCHEDULING = ("activeDeadlineSeconds", "ephemeralContainers", "terminationGracePeriodSeconds")


def _scheduling_view(pod: JsonObject) -> tuple[object, object, dict[str, object]]:
    """What of a pod a decision may read: its spec without the fields above and the images,
    its labels (inter-pod affinity and spread match the pod itself), the deciding annotations."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec")
    if isinstance(spec, dict):
        spec = {k: v for k, v in spec.items() if k not in _NOT_SCHEDULING}
        for field in ("containers", "initContainers"):
            if isinstance(spec.get(field), list):
                spec[field] = [{k: v for k, v in c.items() if k != "image"}
                               if isinstance(c, dict) else c for c in spec[field]]
    annotations = meta.get("annotations")
    deciding = {k: v for k, v in annotations.items() if k in keys.DECIDING} \
        if isinstance(annotations, dict) else {}
    return spec, meta.get("labels"), deciding


def may_fit_now(old: JsonObject, new: JsonObject) -> bool:
    """An update of a pending pod that may change its decision (kube-scheduler's queueing hints
    name these pod events: its labels, resources, tolerations, gates). Not its status, which
    the allocator's own reports write, nor its resourceVersion, other annotations or images."""
    return _scheduling_view(old) != _scheduling_view(new)


class PendingQueue:
    def __init__(self, scheduler_name: str | None,
                 backoff: tuple[float, float] = (POD_INITIAL_BACKOFF, POD_MAX_BACKOFF),
                 clock: Callable[[], float] = time.monotonic):
        """`scheduler_name`: the pods it takes (None: any). `backoff`: (initial, maximum)
        seconds of a pod that did not fit; (0, 0): retried on every change."""
        self.scheduler_name, self.backoff, self.clock = scheduler_name, backoff, clock
        self._pods: dict[str, JsonObject] = {}  # uid -> the pod as last seen, unbound
        self._tries: dict[str, LastTry] = {}  # pods that did not fit, or whose write failed

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def get(self, uid: str) -> JsonObject | None:
        return self._pods.get(uid)

    def pods(self) -> list[JsonObject]:
        return list(self._pods.values())

    def upsert(self, pod: JsonObject) -> None:
        """An unbound pod as the watch shows it: waits here if it is ours and not leaving."""
        uid, meta = uid_of(pod), pod["metadata"]
        theirs = self.scheduler_name is not None and \
            (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name
        if theirs or meta.get("deletionTimestamp"):
            self.remove(uid)
            return
        old, last = self._pods.get(uid), self._tries.get(uid)
        if old is not None and last is not None and not last.pod_changed \
                and may_fit_now(old, pod):
            self._tries[uid] = replace(last, pod_changed=True)  # tried when its backoff ends
        self._pods[uid] = pod

    def remove(self, uid: str) -> JsonObject | None:
        """Out of the queue: bound, gone, or taken for a binding."""
        self._tries.pop(uid, None)
        return self._pods.pop(uid, None)

    def relist(self, pods: list[JsonObject]) -> None:
        """The pending pods of a full list. Those still listed keep their backoff: a relist
        is no reason to decide a pod sooner."""
        listed = {uid_of(p) for p in pods}
        for uid in [uid for uid in self._pods if uid not in listed]:
            self.remove(uid)
        self._tries = {uid: t for uid, t in self._tries.items() if uid in listed}
        for pod in pods:
            self.upsert(pod)

    def due(self, generation: int) -> Iterator[JsonObject]:
        """The pods to try now, in queue order. A pod removed while the caller works through
        them is skipped; a gated pod waits here, never tried, until its gates are removed
        (an update of its spec)."""
        now = self.clock()
        for pod in sorted(self._pods.values(), key=queue_order):
            uid = uid_of(pod)
            if uid not in self._pods or scheduling_gates(self._pods[uid]):
                continue
            last = self._tries.get(uid)
            if last is None or last.due(generation, now):
                yield self._pods[uid]

    def unschedulable(self, uid: str, generation: int) -> None:
        """A try placed nothing at `generation`: its backoff grows."""
        self._tries[uid] = failed_try(self._tries.get(uid), generation, self.clock(), *self.backoff)

    def write_failed(self, pod: JsonObject) -> None:
        """Its binding was refused: it waits again, tried after ERROR_RETRY."""
        self._pods[uid_of(pod)] = pod
        self._tries[uid_of(pod)] = LastTry(None, self.clock())

    def last_try(self, uid: str) -> LastTry | None:
        return self._tries.get(uid)
