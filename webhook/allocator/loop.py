"""The allocator's decision loop: one thread owns the pod cache, applies events and decides pods.

Only the Lease holder runs a session (watches + decisions). Every session starts from a
fresh list of nodes and pods, so usage is rebuilt from the bound pods' annotations before
anything is decided (scheduling/cache.py keeps the shares of our bindings the watch has not
shown yet). Every API call runs elsewhere: the bindings and the re-reads of pods whose
binding outcome is unknown in the binder's pool, whose outcomes come back through the same
queue as the watch events; the reports on unschedulable pods on the reporter's thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from .. import annotations as keys
from ..cards import Fleet
from ..config import Config
from ..kube.api import Api
from ..kube.binder import EVENT_KIND as BIND_OUTCOME, READ_KIND as READ_OUTCOME, BindOutcome, \
    Binder, ReadOutcome
from ..kube.informer import Informer, watch_cluster
from ..kube.leader import LeaderElector
from ..kube.reporter import Reporter
from ..scheduling import reasons
from ..scheduling.binding import binding_body
from ..scheduling.cache import PodCache, name_of, uid_of
from ..scheduling.decide import NoFit, Placement, decide
from ..scheduling.priority import pod_priority
from ..scheduling.request import request_of
from .metrics import Metrics

log = logging.getLogger(__name__)

RETRY_BACKSTOP = 30.0  # retry an unschedulable pod at least this often even if nothing changed
ERROR_RETRY = 2.0  # after a failed write
REREAD_EVERY = 1.0  # seconds between re-reads of one pod whose binding outcome is unknown
# A pod that did not fit waits this long before it is decided again, whatever changes, doubling
# with each try that places nothing: kube-scheduler's podInitialBackoffSeconds and
# podMaxBackoffSeconds. So a pod that is costly to decide (a huge node affinity) and never fits
# takes the decision thread for one decision every 10 s at most, not one per cluster change.
POD_INITIAL_BACKOFF = 1.0
POD_MAX_BACKOFF = 10.0


def queue_order(pod: dict) -> tuple:
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

    def due(self, generation: int, now: float) -> bool:
        if self.generation is None:  # back off a little
            return now - self.at >= ERROR_RETRY
        if now - self.at < self.backoff:
            return False
        return self.generation != generation or now - self.at >= RETRY_BACKSTOP


def failed_try(last: LastTry | None, generation: int, now: float, initial: float,
               maximum: float) -> LastTry:
    """The record after one more try that placed nothing (`last`: the one before, if any)."""
    failures = (last.failures if last is not None else 0) + 1
    return LastTry(generation, now, failures, backoff_seconds(failures, initial, maximum))


def concerns(old: dict, new: dict) -> bool:
    """An update of a pending pod that may change its decision: its spec or annotations (not
    its status, which the allocator's own reports write, nor its resourceVersion)."""
    def annotations(p: dict):
        return (p.get("metadata") or {}).get("annotations")
    return old.get("spec") != new.get("spec") or annotations(old) != annotations(new)


class Allocator:
    def __init__(self, config: Config, api: Api, leader: LeaderElector, metrics: Metrics,
                 identity: str, bind_threads: int, backoff: tuple[float, float] | None = None):
        """`backoff`: (initial, maximum) seconds of a pod that did not fit (None: the module's
        POD_INITIAL_BACKOFF and POD_MAX_BACKOFF; (0, 0): retried on every change, as before)."""
        self.config, self.api, self.leader, self.metrics = config, api, leader, metrics
        self.backoff = backoff if backoff is not None else (POD_INITIAL_BACKOFF, POD_MAX_BACKOFF)
        self.clock = time.monotonic  # of the retry times (a test's own clock)
        self.fleet = Fleet.of(config.mthreads.memory_per_card)
        self.reporter = Reporter(api, config.scheduler_name, identity)
        self.events: queue.Queue = queue.Queue()
        self.binder = Binder(api, self.events, leader.holds, bind_threads)
        self.session = 0
        self.informers: list[Informer] = []
        self.stop = threading.Event()
        self.heartbeat = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        self.cache = PodCache(self.config.mthreads, self.config.scheduler_name,
                              on_settled=self._settled, on_changed=self._changed,
                              bound=self.metrics.bound)
        self.tries: dict[str, LastTry] = {}  # pending pods that did not fit, or whose write failed
        # (their backoff: a change of the state retries one only once its backoff is over)
        self.reading: set[str] = set()  # uncertain pods whose re-read is under way
        self.last_read: dict[str, float] = {}  # uid -> monotonic of its last re-read

    def _changed(self, uid: str) -> None:
        # the user changed what the pod asks for: try again now, its backoff starts over
        self.tries.pop(uid, None)

    def _settled(self, uid: str) -> None:
        self.tries.pop(uid, None)
        self.last_read.pop(uid, None)
        self.reporter.forget(uid)

    @property
    def state(self):
        return self.cache.state

    # sessions
    def _start_session(self) -> None:
        self.session += 1
        self._reset()
        log.info("leading: listing nodes and pods before deciding")
        self.informers = watch_cluster(self.api, self.events.put, self.session)

    def _end_session(self) -> None:
        for i in self.informers:
            i.stop()
        self.informers = []
        self.session += 1
        self._reset()

    @property
    def active(self) -> bool:
        return bool(self.informers)

    # events
    def _apply(self, session: int, kind: str, event: str, obj) -> None:
        if kind == BIND_OUTCOME:
            self.binder.applied()
        if session != self.session:
            return  # from a session that ended
        if kind == BIND_OUTCOME:
            self._bind_outcome(obj)
        elif kind == READ_OUTCOME:
            self._read_outcome(obj)
        else:
            if kind == "pod" and event not in ("RESET", "DELETED"):
                old = self.cache.pending.get(uid_of(obj))
                if old is not None and concerns(old, obj):
                    self._changed(uid_of(obj))
            self.cache.apply(kind, event, obj)

    def _drain(self, wait: float) -> None:
        try:
            item = self.events.get(timeout=wait)
        except queue.Empty:
            return
        self._apply(*item)
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return
            self._apply(*item)

    # decisions
    def _due(self, uid: str, now: float) -> bool:
        last = self.tries.get(uid)
        return last is None or last.due(self.state.generation, now)

    def schedule_pass(self) -> int:
        """Try every pending pod that is due; returns the number of bindings sent."""
        self._reread_uncertain()
        bound = 0
        now = self.clock()
        pending = self.cache.pending
        for pod in sorted(pending.values(), key=queue_order):
            uid = uid_of(pod)
            if uid not in pending or not self._due(uid, now):
                continue
            while self.binder.full and not self.stop.is_set():
                self._drain(0.5)  # wait for a write to finish
            if not self.leader.holds() or self.stop.is_set():
                break
            if uid not in pending:  # gone or changed while we waited
                continue
            bound += self.attempt(pending[uid])
            self._drain(0)  # keep the state current between decisions
        return bound

    def attempt(self, pod: dict) -> int:
        uid = uid_of(pod)
        t0 = time.perf_counter()
        ask = request_of(pod, self.config, self.fleet)
        if ask.invalid:
            self.metrics.failures.labels(reasons.INVALID_REQUEST).inc()
            self._failed(uid)
            self.reporter.unschedulable(pod, ask.invalid)
            return 0
        result = decide(pod, ask.request, self.state, self.config, ask.need, ask.devices)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        if isinstance(result, NoFit):
            for r in result.rejected or ("NoNodes",):
                self.metrics.failures.labels(r).inc()
            self._failed(uid)
            self.reporter.unschedulable(pod, result.message)
            return 0
        return self.bind(pod, result, ask.request is not None)

    def _failed(self, uid: str) -> None:
        self.tries[uid] = failed_try(self.tries.get(uid), self.state.generation, self.clock(),
                                     *self.backoff)

    def bind(self, pod: dict, p: Placement, mthreads: bool) -> int:
        """Assume the share now, so the next decision sees it, and send the write."""
        meta = pod["metadata"]
        if not self.leader.holds():
            return 0
        body = binding_body(meta["namespace"], meta["name"], meta["uid"], p, time.time_ns(),
                            with_annotations=mthreads)
        self.tries.pop(meta["uid"], None)
        self.cache.assume(p.share)
        self.binder.submit(self.session, pod, p, body)
        return 1

    def _bind_outcome(self, o: BindOutcome) -> None:
        meta = o.body["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        share = o.placement.share
        if o.status is None:
            # we do not know whether it happened: hold the share until a read tells us
            self.cache.bind_unknown(share, ns, name)
            log.warning("bind %s/%s: %s; outcome unknown, holding its cards until re-read",
                        ns, name, o.message)
            return
        self.metrics.bind_seconds.observe(o.seconds)
        if o.ok:
            self.cache.bind_ok(share)
            self.metrics.allocated.inc()
            self.reporter.forget(uid)
            devices = meta.get("annotations", {}).get(keys.ALLOCATED, "-")
            log.info("bound %s/%s to %s: %s", ns, name, o.placement.node, devices)
            return
        if o.status in (404, 409):  # gone, or bound by someone else: hold the share, read now
            log.info("bind %s/%s: %s; re-reading it", ns, name, o.message)
            self.cache.bind_unknown(share, ns, name)
            if uid in self.cache.uncertain:
                self._reread(uid, ns, name)
            return
        log.warning("bind %s/%s: %s", ns, name, o.message)
        if self.cache.bind_failed(share, o.pod):
            self.tries[uid] = LastTry(None, self.clock())

    def _reread(self, uid: str, ns: str, name: str) -> None:
        self.reading.add(uid)
        self.last_read[uid] = time.monotonic()
        self.binder.reread(self.session, uid, ns, name)

    def _read_outcome(self, o: ReadOutcome) -> None:
        self.reading.discard(o.uid)
        if o.uid in self.cache.uncertain:
            self.cache.resolved(o.uid, o.status, o.pod)

    def _reread_uncertain(self) -> None:
        now = time.monotonic()
        for uid, (ns, name) in list(self.cache.uncertain.items()):
            if uid not in self.reading and now - self.last_read.get(uid, 0.0) >= REREAD_EVERY:
                self._reread(uid, ns, name)

    # the loop
    def update_gauges(self) -> None:
        rows = []
        for info in self.state.nodes.values():
            for c in info.cards.cards:
                u = self.state.card(c.id)
                rows.append((info.name, c.id, u.memory_mib, u.cores))
        self.metrics.set_cards(rows)

    def run(self) -> None:
        last_gauges = 0.0
        while not self.stop.is_set():
            self.heartbeat = time.monotonic()
            leading = self.leader.holds()
            self.metrics.leader.set(1 if leading else 0)
            if leading and not self.active:
                self._start_session()
            elif not leading and self.active:
                log.warning("not leading: stopped deciding")
                self._end_session()
            if not self.active:
                self.leader.changed.wait(0.5)
                self.leader.changed.clear()
                continue
            self._drain(0.2)
            if self.cache.ready:
                self.schedule_pass()
                if time.monotonic() - last_gauges > 5:
                    self.update_gauges()
                    last_gauges = time.monotonic()
        self._end_session()
        self.binder.shutdown()
        self.reporter.stop()
