"""The allocator's decision loop: one thread owns the pod cache, applies events and decides pods.

Only the Lease holder runs a session (watches + decisions). Every session starts from a
fresh list of nodes and pods, so usage is rebuilt from the bound pods' annotations before
anything is decided. Each pod event goes to the scheduler cache (scheduling/cache.py: the
shares, and the lifecycle of the ones we assume) and, while the pod waits, to the pending
queue (scheduling/queue.py: the order and each pod's backoff). Every API call runs elsewhere,
on the I/O loop's thread (kube/io_loop.py): the watches, the bindings and the re-reads of pods
whose binding outcome is unknown (the binder's), whose outcomes come back through the same
event queue as the watch events, and the reports on unschedulable pods (the reporter's). What
a binding's outcome does to the cache, and when an unknown one is read again, is the binding
cycle's (scheduling/binding_cycle.py), the extender's too.

No object stops the loop (issue 46): an event whose object raises while applied, and a pod
whose decision raises, are told of (observe/object_errors.py) and skipped; such a pod is
backed off as one that did not fit, and the other pods are decided and bound.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from ..kube.api import Api
from ..kube.binder import EVENT_KIND as BIND_OUTCOME
from ..kube.binder import READ_KIND as READ_OUTCOME
from ..kube.binder import Binder, BindOutcome, ReadOutcome
from ..kube.informer import Informer, watch_cluster
from ..kube.leader import LeaderElector
from ..kube.reporter import Reporter
from ..metrics.allocator_metrics import Metrics
from ..metrics.object_errors import DECIDE, INDEX, ObjectErrors
from ..model import annotations as keys
from ..model.cards import Fleet
from ..model.config import Config
from ..scheduling import reasons
from ..scheduling.binding import binding_body
from ..scheduling.binding_cycle import BindingCycle, Outcome
from ..scheduling.cache import NAMESPACE, STORAGE_KINDS, SchedulerCache
from ..scheduling.cycle_state import cycle_of
from ..scheduling.decide import NoFit, Placement, place
from ..scheduling.node_annotations import WARNING_REASON, IgnoredEntries
from ..scheduling.object_errors import ObjectError, object_error
from ..scheduling.pod_status import LIVE_PODS, is_bound, is_finished, uid_of
from ..scheduling.queue import POD_INITIAL_BACKOFF, POD_MAX_BACKOFF, PendingQueue, queue_order
from ..scheduling.request import request_of

log = logging.getLogger(__name__)

LOOP_PAUSE = 1.0  # seconds the loop waits after a pass that raised outside any one object


class Allocator:
    def __init__(self, config: Config, api: Api, leader: LeaderElector, metrics: Metrics,
                 identity: str, bind_threads: int, backoff: tuple[float, float] | None = None):
        """`backoff`: (initial, maximum) seconds of a pod that did not fit (None: the queue's
        POD_INITIAL_BACKOFF and POD_MAX_BACKOFF; (0, 0): retried on every change)."""
        self.config, self.api, self.leader, self.metrics = config, api, leader, metrics
        self.backoff = backoff if backoff is not None else (POD_INITIAL_BACKOFF, POD_MAX_BACKOFF)
        self.clock = time.monotonic  # of the retry times (a test's own clock)
        self.fleet = Fleet.of(config.mthreads.memory_per_card)
        self.reporter = Reporter(api, config.scheduler_name, identity)
        self.errors = ObjectErrors("allocator", metrics.registry, self.reporter.warning)
        self.events: queue.Queue = queue.Queue()
        self.binder = Binder(api, self.events, leader.holds, bind_threads)
        self.session = 0
        self.informers: list[Informer] = []
        self.stop = threading.Event()
        self.heartbeat = time.monotonic()
        # told once per change, not again by each session's relist
        self.ignored = IgnoredEntries(config.mthreads.max_instances_per_card)
        self._reset()

    def _reset(self) -> None:
        self.cache = SchedulerCache(self.config.mthreads,
                                    kinds=("node", "pod", NAMESPACE) + STORAGE_KINDS)
        self.queue = PendingQueue(self.config.scheduler_name, self.backoff, lambda: self.clock())
        self.cycle = BindingCycle(self.cache)  # the outcomes, and the re-reads they need

    @property
    def reading(self) -> set[str]:
        """The uncertain pods whose re-read is under way."""
        return self.cycle.reading

    def _settled(self, uid: str) -> None:
        """The pod was seen bound or gone: nothing of it waits here any more."""
        self.queue.remove(uid)
        self.reporter.forget(uid)

    # sessions
    def _start_session(self) -> None:
        self.session += 1
        self._reset()
        log.info("leading: listing nodes and pods before deciding")
        self.informers = watch_cluster(self.api, self.events.put, self.session, LIVE_PODS,
                                       storage=True)

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
        """One event, its object's failure told of and skipped (the cache's own, and what
        raises here after it)."""
        if kind == BIND_OUTCOME:
            self.binder.applied()
        if session != self.session:
            return  # from a session that ended
        try:
            failed = self._take(kind, event, obj)
        except Exception as e:
            failed = [object_error("pod" if kind in (BIND_OUTCOME, READ_OUTCOME) else kind,
                                   _pod_of(kind, obj), e)]
        told: set[tuple[str, str, str]] = set()
        for err in failed:  # a pod the cache and the queue both refused is told of once
            if (err.kind, err.name, err.uid) not in told:
                told.add((err.kind, err.name, err.uid))
                self.errors.report(INDEX, err)

    def _take(self, kind: str, event: str, obj) -> list[ObjectError]:
        if kind == BIND_OUTCOME:
            self._bind_outcome(obj)
            return []
        if kind == READ_OUTCOME:
            self._read_outcome(obj)
            return []
        failed = self.cache.apply(kind, event, obj)
        try:
            if kind == "pod":
                failed += self._route_pod(event, obj)
            elif kind == "node":
                for said in self.ignored.seen(event, obj):
                    log.warning("node %s: %s", said.node, said.message)
                    self.reporter.node_warning(said.node, said.uid, WARNING_REASON, said.message)
        except Exception as e:  # after the cache has it: its own failures are told of too
            failed.append(object_error(kind, obj, e))
        return failed

    def _route_pod(self, event: str, obj) -> list[ObjectError]:
        """A pod event, after the cache has it: a pending pod of ours waits in the queue (not
        while we are binding it: an event older than our binding). Returns the pods of a
        list that raised (the others are queued)."""
        if event != "RESET":
            if event == "DELETED" or is_bound(obj) or is_finished(obj):
                self._settled(uid_of(obj))
            elif not self.cache.is_assumed(uid_of(obj)):
                queue_order(obj)  # what the queue reads of each pod to order them all
                self.queue.upsert(obj)
            return []
        waiting, failed = [], []
        for p in obj:
            try:
                if not is_bound(p) and not is_finished(p) and not self.cache.is_assumed(uid_of(p)):
                    queue_order(p)
                    waiting.append(p)
            except Exception as e:
                failed.append(object_error("pod", p, e))
        self.queue.relist(waiting)
        return failed

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
    def schedule_pass(self) -> int:
        """Try every pending pod that is due; returns the number of bindings sent."""
        self.cycle.reread_due(self._reread)
        bound = 0
        for pod in self.queue.due(self.cache.generation):
            uid = uid_of(pod)
            while self.binder.full and not self.stop.is_set():
                self._drain(0.5)  # wait for a write to finish
            if not self.leader.holds() or self.stop.is_set():
                break
            pod = self.queue.get(uid)
            if pod is None:  # gone or bound while we waited
                continue
            try:
                bound += self.attempt(pod)
            except Exception as e:  # this pod's: told of, backed off; the others go on
                self._failed(uid)
                self.errors.report(DECIDE, object_error("pod", pod, e))
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
        cycle = cycle_of(pod, ask, self.config)  # the pod's side, before the cache's lock
        result = self.cache.read(lambda state: place(pod, ask, state, self.config, cycle))
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        if isinstance(result, NoFit):
            for r in result.rejected or ("NoNodes",):
                self.metrics.failures.labels(r).inc()
            self._failed(uid)
            self.reporter.unschedulable(pod, result.message)
            return 0
        return self.bind(pod, result, ask.request is not None)

    def _failed(self, uid: str) -> None:
        self.queue.unschedulable(uid, self.cache.generation)

    def bind(self, pod: dict, p: Placement, mthreads: bool) -> int:
        """Assume the share now, so the next decision sees it, and send the write."""
        meta = pod["metadata"]
        if not self.leader.holds():
            return 0
        body = binding_body(meta["namespace"], meta["name"], meta["uid"], p, time.time_ns(),
                            with_annotations=mthreads)
        self.cycle.assume(p.share, meta["namespace"], meta["name"])
        try:
            self.binder.submit(self.session, body, (pod, p))
        except Exception:
            self.cycle.not_written(p.share)  # nothing will be written: the cards are free again
            raise
        self.queue.remove(meta["uid"])
        return 1

    def _bind_outcome(self, o: BindOutcome) -> None:
        """A write's outcome, applied by the binding cycle; what is left is the queue's and
        the logs' (a re-read it starts comes back as a READ_OUTCOME)."""
        meta = o.body["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        pod, placement = o.context  # as submitted in bind()
        if o.status is not None:
            self.metrics.bind_seconds.observe(o.seconds)
        outcome, _ = self.cycle.outcome(placement.share, ns, name, o.status, self._reread)
        if outcome is Outcome.UNKNOWN:
            log.warning("bind %s/%s: %s; outcome unknown, holding its cards until re-read",
                        ns, name, o.message)
        elif outcome is Outcome.BOUND:
            self.metrics.allocated.inc()
            self.reporter.forget(uid)
            devices = meta.get("annotations", {}).get(keys.ALLOCATED, "-")
            log.info("bound %s/%s to %s: %s", ns, name, placement.node, devices)
        elif outcome is Outcome.READ_NOW:  # gone, or bound by someone else: held till a read
            log.info("bind %s/%s: %s; re-reading it", ns, name, o.message)
        elif outcome is Outcome.DROPPED:  # nothing was written: it waits again
            log.warning("bind %s/%s: %s", ns, name, o.message)
            self.queue.write_failed(pod)

    def _reread(self, uid: str, ns: str, name: str) -> None:
        """The binding cycle's re-read: a GET on the I/O loop; its answer, a READ_OUTCOME."""
        self.binder.reread(self.session, uid, ns, name)

    def _read_outcome(self, o: ReadOutcome) -> None:
        told = self.cycle.read_answer(o.uid, o.status, o.pod)
        if told == "unbound":  # our binding did not happen: it waits again
            self.queue.upsert(o.pod)
        elif told in ("bound", "gone"):
            self._settled(o.uid)

    # the loop
    def update_gauges(self) -> None:
        def rows(state):
            return [(info.name, c.id, state.card(c.id).memory_mib, state.card(c.id).cores)
                    for info in state.nodes.values() for c in info.cards.cards]
        self.metrics.set_cards(self.cache.read(rows))

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
            try:
                self._drain(0.2)
                if self.cache.ready:
                    self.schedule_pass()
                    if time.monotonic() - last_gauges > 5:
                        self.update_gauges()
                        last_gauges = time.monotonic()
            except Exception:  # not one object's (those are caught where they are applied)
                log.exception("decision loop: a pass raised; going on in %.0f s", LOOP_PAUSE)
                self.stop.wait(LOOP_PAUSE)
        self._end_session()
        self.binder.shutdown()
        self.reporter.stop()


def _pod_of(kind: str, obj) -> object:
    """The pod an event is about: a binding's or a read's outcome names its pod."""
    if kind == BIND_OUTCOME:
        return obj.context[0]  # as submitted in bind()
    if kind == READ_OUTCOME:
        return obj.pod or {"metadata": {"uid": obj.uid}}
    return obj
