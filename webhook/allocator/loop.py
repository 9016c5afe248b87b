"""The decision loop: one thread owns the state, applies watch events and decides pods.

Only the Lease holder runs a session (watches + decisions). Every session starts from a
fresh list of nodes and pods, so usage is rebuilt from the bound pods' annotations before
anything is decided; shares of pods we bound, or are binding, but the watch has not shown
bound yet are kept ("assumed") until the pod is seen bound or gone, so nothing is handed
out twice. The writes themselves run in a small pool (binder.py); their outcomes come back
through the same queue as the watch events.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from .. import annotations as keys
from ..cards import Fleet
from ..config import Config
from ..pods import InvalidRequest, is_mthreads_pod, read_request, resource_names
from . import reasons
from .api import Api, ApiError
from .binder import EVENT_KIND as BIND_OUTCOME, BindOutcome, Binder
from .binding import binding_body
from .decide import NoFit, Placement, decide
from .informer import Informer
from .leader import LeaderElector
from .metrics import Metrics
from .reporter import Reporter
from .shares import PodShare, share_of
from .state import ClusterState

log = logging.getLogger(__name__)

RETRY_BACKSTOP = 30.0  # retry an unschedulable pod at least this often even if nothing changed
ERROR_RETRY = 2.0  # after a failed write
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _uid(pod: dict) -> str:
    return pod["metadata"]["uid"]


def _key(pod: dict) -> str:
    m = pod["metadata"]
    return f"{m.get('namespace')}/{m.get('name')}"


class Allocator:
    def __init__(self, config: Config, api: Api, leader: LeaderElector, metrics: Metrics,
                 identity: str, bind_threads: int):
        self.config, self.api, self.leader, self.metrics = config, api, leader, metrics
        self.fleet = Fleet.of(config.mthreads.memory_per_card)
        self.names = resource_names(config.mthreads)
        self.reporter = Reporter(api, config.scheduler_name, identity)
        self.events: queue.Queue = queue.Queue()
        self.binder = Binder(api, self.events, leader.holds, bind_threads)
        self.session = 0
        self.informers: list[Informer] = []
        self.stop = threading.Event()
        self.heartbeat = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        self.state = ClusterState(self.config.mthreads)
        self.pending: dict[str, dict] = {}
        self.assumed: dict[str, PodShare] = {}  # bound or being bound by us, not yet seen bound
        self.uncertain: dict[str, tuple[str, str]] = {}  # uid -> (ns, name): bind outcome unknown
        self.retry: dict[str, tuple[int, float]] = {}  # uid -> (generation, monotonic) of last try
        self.warned: set[str] = set()
        self.synced: set[str] = set()
        self.metrics.bound.clear()

    # sessions
    def _start_session(self) -> None:
        self.session += 1
        self._reset()
        log.info("leading: listing nodes and pods before deciding")
        self.informers = [
            Informer(self.api, "node", "/api/v1/nodes", None, self.events, self.session).start(),
            Informer(self.api, "pod", "/api/v1/pods", LIVE_PODS, self.events, self.session).start(),
        ]

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
        elif kind == "node":
            self.state.node_event(event, obj)
        elif event == "RESET":
            self._relist_pods(obj)
        elif event == "DELETED":
            self._pod_gone(_uid(obj))
        else:
            self._pod_seen(obj)
        if event == "RESET":
            self.synced.add(kind)

    def _relist_pods(self, pods: list[dict]) -> None:
        keep = dict(self.assumed)
        self.state.clear_shares()
        self.metrics.bound.clear()
        self.pending.clear()
        self.assumed.clear()
        unbound = set()
        for pod in pods:
            if not (pod.get("spec") or {}).get("nodeName"):
                unbound.add(_uid(pod))
        for uid, share in keep.items():
            if uid in unbound:  # our bind is newer than the list
                self.assumed[uid] = share
                self.state.add(share)
        for pod in pods:
            self._pod_seen(pod)

    def _pod_seen(self, pod: dict) -> None:
        uid = _uid(pod)
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            self.pending.pop(uid, None)
            self.assumed.pop(uid, None)
            self.uncertain.pop(uid, None)
            self.retry.pop(uid, None)
            self.reporter.forget(uid)
            share = share_of(pod)
            if share.problem and uid not in self.warned:
                self.warned.add(uid)
                log.warning("pod %s: %s; counting %s as fully used", _key(pod), share.problem,
                            ", ".join(c.card for c in share.cards) or f"every card of {share.node}")
            self.state.add(share)
            self.metrics.bound.seen(pod)
            return
        if uid in self.assumed:
            return  # an event older than our binding
        meta = pod["metadata"]
        if spec.get("schedulerName") != self.config.scheduler_name or meta.get("deletionTimestamp"):
            self.pending.pop(uid, None)
            return
        old = self.pending.get(uid)
        if old is not None and (old.get("metadata") or {}).get("annotations") != meta.get("annotations"):
            self.retry.pop(uid, None)  # the user changed what the pod asks for: try again now
        self.pending[uid] = pod

    def _pod_gone(self, uid: str) -> None:
        self.pending.pop(uid, None)
        self.assumed.pop(uid, None)
        self.uncertain.pop(uid, None)
        self.retry.pop(uid, None)
        self.warned.discard(uid)
        self.reporter.forget(uid)
        self.state.remove(uid)
        self.metrics.bound.gone(uid)

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
        last = self.retry.get(uid)
        if last is None:
            return True
        generation, at = last
        if generation == -1:  # a write failed: back off a little
            return now - at >= ERROR_RETRY
        return generation != self.state.generation or now - at >= RETRY_BACKSTOP

    def schedule_pass(self) -> int:
        """Try every pending pod that is due; returns the number of bindings sent."""
        self._resolve_uncertain()
        bound = 0
        now = time.monotonic()
        order = sorted(self.pending.values(), key=lambda p: (
            p["metadata"].get("creationTimestamp") or "", _key(p)))
        for pod in order:
            uid = _uid(pod)
            if uid not in self.pending or not self._due(uid, now):
                continue
            while self.binder.full and not self.stop.is_set():
                self._drain(0.5)  # wait for a write to finish
            if not self.leader.holds() or self.stop.is_set():
                break
            if uid not in self.pending:  # gone or changed while we waited
                continue
            bound += self.attempt(self.pending[uid])
            self._drain(0)  # keep the state current between decisions
        return bound

    def attempt(self, pod: dict) -> int:
        uid = _uid(pod)
        t0 = time.perf_counter()
        request = None
        try:
            if self.config.mthreads.enabled and is_mthreads_pod(pod, self.names):
                request = read_request(pod, self.config.mthreads, self.fleet)
        except InvalidRequest as e:
            self.metrics.failures.labels(reasons.INVALID_REQUEST).inc()
            self.retry[uid] = (self.state.generation, time.monotonic())
            self.reporter.unschedulable(pod, f"{reasons.INVALID_REQUEST}: the pod breaks "
                                             f"admission rule {e.rule}: {e.message}")
            return 0
        result = decide(pod, request, self.state, self.config)
        self.metrics.decision_seconds.observe(time.perf_counter() - t0)
        if isinstance(result, NoFit):
            for r in result.rejected or ("NoNodes",):
                self.metrics.failures.labels(r).inc()
            self.retry[uid] = (self.state.generation, time.monotonic())
            self.reporter.unschedulable(pod, result.message)
            return 0
        return self.bind(pod, result, request is not None)

    def bind(self, pod: dict, p: Placement, mthreads: bool) -> int:
        """Assume the share now, so the next decision sees it, and send the write."""
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        if not self.leader.holds():
            return 0
        body = binding_body(ns, name, uid, p, time.time_ns(), with_annotations=mthreads)
        self._assume(uid, p.share)
        self.binder.submit(self.session, pod, p, body)
        return 1

    def _bind_outcome(self, o: BindOutcome) -> None:
        meta = o.body["metadata"]
        uid, ns, name = meta["uid"], meta["namespace"], meta["name"]
        if o.status is None:
            # we do not know whether it happened: hold the share until a read tells us
            self.uncertain[uid] = (ns, name)
            log.warning("bind %s/%s: %s; outcome unknown, holding its cards until re-read",
                        ns, name, o.message)
            return
        self.metrics.bind_seconds.observe(o.seconds)
        if o.ok:
            self.metrics.allocated.inc()
            self.reporter.forget(uid)
            devices = meta.get("annotations", {}).get(keys.ALLOCATED, "-")
            log.info("bound %s/%s to %s: %s", ns, name, o.placement.node, devices)
            return
        if o.status in (404, 409):
            log.info("bind %s/%s: %s; re-reading it", ns, name, o.message)
            self._reread(uid, ns, name)
            return
        log.warning("bind %s/%s: %s", ns, name, o.message)
        if uid in self.assumed:  # not seen bound or gone meanwhile: give the share back
            self.assumed.pop(uid)
            self.state.remove(uid)
            self.pending[uid] = o.pod
            self.retry[uid] = (-1, time.monotonic())

    def _assume(self, uid: str, share: PodShare) -> None:
        self.pending.pop(uid, None)
        self.retry.pop(uid, None)
        self.assumed[uid] = share
        self.state.add(share)

    def _reread(self, uid: str, ns: str, name: str) -> bool:
        """Learn a pod's real state after a refused or unknown write; False if unreachable."""
        try:
            reply = self.api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except ApiError:
            return False
        if reply.status == 404 or (reply.ok and reply.body["metadata"].get("uid") != uid):
            self._pod_gone(uid)
        elif reply.ok:
            pod = reply.body
            self.uncertain.pop(uid, None)
            if not (pod.get("spec") or {}).get("nodeName"):
                self.assumed.pop(uid, None)
                self.state.remove(uid)
            self._pod_seen(pod)
        else:
            return False
        return True

    def _resolve_uncertain(self) -> None:
        for uid, (ns, name) in list(self.uncertain.items()):
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
            if self.synced == {"node", "pod"}:
                self.schedule_pass()
                if time.monotonic() - last_gauges > 5:
                    self.update_gauges()
                    last_gauges = time.monotonic()
        self._end_session()
        self.binder.shutdown()
