"""The extender's cache: the shared pod cache (scheduling/cache.py) behind one lock, fed by
the watches, with the few questions the HTTP handlers ask of it.

kube-scheduler sends node names only, so the extender keeps the nodes and the bound pods'
shares itself (it is node-cache capable). The verbs run on the server's event loop (and
/preempt on a few threads, extender/app.py) and each watch event is applied as it is read,
on that loop too (`watches`; on threads of their own when the API server is reached through a
proxy); every read and change of the
pod cache happens inside one method here, under the lock; the API calls are made outside it.

The pod watch shows bound pods only (scheduling/cache.py, `BOUND_LIVE_PODS`); a third watch
keeps the pods that wait for the extender's scheduler (`waiting`, `waiting_selector`). A call's
body only names its pod: every verb answers for the pod as the API server holds it, from
`waiting` or, when the watch has not shown it yet, from a read (verbs.py), so a body cannot
make the extender reserve, choose or write for a pod that does not exist, waits for another
scheduler or asks for something else.

Reservations: the filter chooses the node and the cards and counts them at once (an assumed
share with no write under way, `RESERVE_FOR` seconds to live); the bind writes that choice.
A reservation ends when the bind takes it, when the pod is seen bound (its real share
replaces it, on that node or another), filtered again, bound for another node, when the
watch of waiting pods no longer shows the pod (deleted, or bound by another), or when its
time is up (checked on the cache's clock thread, every half second). Only a pod that waits
for our scheduler gets one, and one at a time.

A relist keeps the assumed shares of the pods it does not show: a reservation lapses as
before, a write under way tells its outcome, and a pod whose write succeeded (its binding
may be newer than the list, or the pod gone since) is read again (`written`, `resolve`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Coroutine

from ..config import Config
from ..kube.api import Api
from ..kube.async_api import AsyncApi
from ..kube.async_informer import AsyncInformer
from ..kube.binder import read_pod
from ..kube.informer import Informer, cluster_watches
from ..scheduling.cache import BOUND_LIVE_PODS, LIVE_PODS, PodCache, uid_of
from ..scheduling.decide import Placement
from ..scheduling.priority import pod_priority
from ..scheduling.request import PodAsk
from ..scheduling.shares import PodShare
from .decisions import choose, fitting_nodes, node_refusal, pick, room_outside, scores
from .preemption import Holder, victims_on

RESOLVE_EVERY = 5.0  # seconds between re-reads of pods whose binding outcome is unknown
RESERVE_FOR = 30.0  # seconds a filter's choice is held for the bind that writes it
IN_DOUBT = "an earlier binding of the pod is being written or its outcome is unknown"


WAITING = "waiting"  # the kind of the watch of the pods waiting for the extender's scheduler


def waiting_selector(scheduler_name: str) -> str:
    """The pods that wait for `scheduler_name`: not bound, not finished."""
    return f"spec.schedulerName={scheduler_name},spec.nodeName=,{LIVE_PODS}"


@dataclass(frozen=True)
class Reservation:
    placement: Placement
    pod: dict  # the API server's pod the filter answered for, for the bind's write
    until: float  # monotonic


@dataclass(frozen=True)
class PodFacts:
    """What preemption reads of a live pod (the shares say what it holds)."""

    priority: int
    terminating: bool


class Cache:
    """The state source of the extender app. `start()` runs the watches; tests may instead
    feed `apply()` by hand."""

    def __init__(self, config: Config, api: Api | None = None):
        self.config, self.api = config, api
        self.lock = threading.RLock()
        self.pods = PodCache(config.mthreads, unbound_watched=False)
        self.bound = self.pods.bound  # the bound pods' cards, for HAMi's metrics
        # uid -> its reservation; every one lives RESERVE_FOR, so the dict's order (a new filter
        # of a pod deletes and re-adds it) is the order in which they lapse
        self.reservations: dict[str, Reservation] = {}
        self.facts: dict[str, PodFacts] = {}  # uid -> priority and deletion, of bound pods
        self.written: dict[str, tuple[str, str]] = {}  # uid -> (ns, name): bound by us, not yet seen
        self.waiting: dict[str, dict] = {}  # uid -> a pod waiting for our scheduler, as watched
        self.waiting_listed = False
        self.stopped = threading.Event()
        self.synced = threading.Event()  # nodes and pods listed
        self._informers: list[Informer] = []
        self._thread: threading.Thread | None = None

    @property
    def state(self):
        return self.pods.state

    # lifecycle
    def start(self, watch_on_threads: bool = True) -> "Cache":
        """The clock; and the watches on threads of their own, unless the caller runs
        `watches()` on its event loop instead."""
        assert self.api is not None
        if watch_on_threads:  # each event applied on its watch's thread as it is read
            self._informers = [
                Informer(self.api, kind, path, selector, lambda item: self.apply(*item[1:]), 1).start()
                for kind, path, selector in self._watched()]
        self._thread = threading.Thread(target=self._run, name="extender-cache", daemon=True)
        self._thread.start()
        return self

    def watches(self, api: AsyncApi) -> list[Coroutine]:
        """The node and pod watches, to run on the caller's event loop (the extender's: each
        event applied there between two answers, kube/async_informer.py); none when `start`
        runs them on threads."""
        if self._informers:
            return []
        return [AsyncInformer(api, kind, path, selector, partial(self.apply, kind)).run()
                for kind, path, selector in self._watched()]

    def _watched(self) -> list[tuple[str, str, str | None]]:
        """(kind, path, fieldSelector): the nodes, the bound pods, the pods waiting for us."""
        return cluster_watches(BOUND_LIVE_PODS) + [
            (WAITING, "/api/v1/pods", waiting_selector(self.config.scheduler_name))]

    def stop(self) -> None:
        self.stopped.set()
        for i in self._informers:
            i.stop()

    def ready(self) -> bool:
        with self.lock:
            return self.pods.ready and self.waiting_listed

    def wait_ready(self, timeout: float) -> bool:
        """Whether nodes and pods are listed, waiting up to `timeout` seconds for it."""
        return self.synced.wait(timeout)

    def _run(self) -> None:
        """The clock: reservations that lapse, and reads of pods whose outcome is unknown."""
        last_resolve = time.monotonic()
        while not self.stopped.wait(0.5):
            self.expire(time.monotonic())
            if time.monotonic() - last_resolve > RESOLVE_EVERY:
                last_resolve = time.monotonic()
                with self.lock:
                    uncertain = list(self.pods.uncertain.items())
                for uid, (ns, name) in uncertain:
                    self.resolve(uid, ns, name)

    def apply(self, kind: str, event: str, obj) -> None:
        with self.lock:
            if kind == WAITING:
                self._apply_waiting(event, obj)
            else:
                self.pods.apply(kind, event, obj)
            if self.pods.ready and self.waiting_listed:
                self.synced.set()
            if kind != "pod":
                return
            if event == "RESET":
                self.facts = {uid_of(p): _facts(p) for p in obj}
                for uid, (ns, name) in self.written.items():  # kept by the relist: read again
                    share = self.pods.assumed.get(uid)
                    if share is not None and uid not in self.pods.in_flight:
                        self.pods.bind_unknown(share, ns, name)
                self.written.clear()
                return
            self.written.pop(uid_of(obj), None)
            if event == "DELETED":
                self.facts.pop(uid_of(obj), None)
            else:
                self.facts[uid_of(obj)] = _facts(obj)

    def _apply_waiting(self, event: str, obj) -> None:
        if event == "RESET":
            self.waiting = {uid_of(p): p for p in obj}
            self.waiting_listed = True
        elif event == "DELETED":  # gone, or out of the selector: bound, finished
            self.waiting.pop(uid_of(obj), None)
            self._release(uid_of(obj))  # a reservation the bind did not take has no use now
        else:
            self.waiting[uid_of(obj)] = obj

    def waiting_pod(self, namespace: str, name: str, uid: str) -> dict | None:
        """The pod waiting for our scheduler with this uid, namespace and name, as watched;
        None when the watch does not show it (not yet, or no such pod)."""
        with self.lock:
            pod = self.waiting.get(uid)
        if pod is None:
            return None
        meta = pod["metadata"]
        return pod if (meta.get("namespace"), meta.get("name")) == (namespace, name) else None

    # reservations
    def _reserved(self, uid: str) -> Reservation | None:
        """The pod's reservation if it still holds (its share is the one assumed)."""
        r = self.reservations.get(uid)
        if r is not None and self.pods.assumed.get(uid) is not r.placement.share:
            del self.reservations[uid]  # seen bound, deleted, or dropped by a relist
            return None
        return r

    def _release(self, uid: str) -> bool:
        r = self._reserved(uid)
        if r is None:
            return False
        del self.reservations[uid]
        self.pods.bind_failed(r.placement.share, r.pod)  # nothing was written: drop it
        return True

    def expire(self, now: float) -> int:
        """Release the reservations whose time is up; returns how many."""
        with self.lock:
            due = []
            for uid, r in self.reservations.items():  # in the order made: the order they lapse
                if r.until > now:
                    break
                due.append(uid)
            return sum(self._release(uid) for uid in due)

    def reserve(self, pod: dict, ask: PodAsk, names: list[str]
                ) -> tuple[Placement | None, dict[str, str], str | None] | str:
        """(the filter's choice among `names`, reserved; the reasons when none fits; then a
        node outside `names` with room for the pod, or None); or why the pod cannot be
        filtered now."""
        uid = uid_of(pod)
        with self.lock:
            self._release(uid)  # a new filter of the pod replaces its reservation
            if uid in self.pods.assumed:
                return IN_DOUBT
            chosen, failed = pick(pod, ask, names, self.pods.state, self.config)
            if chosen is None:
                return None, failed, room_outside(pod, ask, names, self.pods.state, self.config)
            self.pods.assume(chosen.share, writing=False)
            self.reservations[uid] = Reservation(chosen, pod, time.monotonic() + RESERVE_FOR)
            return chosen, failed, None

    def node_count(self) -> int:
        with self.lock:
            return len(self.pods.state.nodes)

    def take_reservation(self, uid: str, namespace: str, name: str,
                         node: str) -> tuple[dict, Placement] | str | None:
        """The pod and the placement reserved for it on `node`, now being written; None if it
        has none (expired, gone) or it was for another node (then it is released); the reason
        when the node's own rules refuse the pod now (released too)."""
        with self.lock:
            r = self._reserved(uid)
            if r is None:
                return None
            meta = r.pod["metadata"]
            if r.placement.node != node or r.until <= time.monotonic() or \
                    (meta.get("namespace"), meta.get("name")) != (namespace, name):
                self._release(uid)
                return None
            refusal = node_refusal(r.pod, node, self.pods.state)
            if refusal is not None:
                self._release(uid)
                return refusal
            del self.reservations[uid]
            self.pods.in_flight.add(uid)  # the reserved share is now a write under way
            return r.pod, r.placement

    # preemption
    def victims(self, pod: dict, ask: PodAsk, proposed: dict[str, tuple[list[str], int]]
                ) -> dict[str, tuple[list[str], int]]:
        """Per node kube-scheduler proposes: its victims plus the card holders to evict, or
        the node left out when no set of lower-priority pods frees room."""
        out = {}
        with self.lock:
            state = self.pods.state
            holders: dict[str, dict[str, Holder]] = {n: {} for n in proposed}
            for uid, share in state.shares.items():
                on = holders.get(share.node)
                if on is not None and uid not in self.pods.assumed:
                    f = self.facts.get(uid) or PodFacts(0, False)
                    on[uid] = Holder(share, f.priority, f.terminating)
            for node, (uids, pdb) in proposed.items():
                chosen = victims_on(pod, ask, node, state, self.config, holders[node], uids)
                if chosen is not None:
                    out[node] = (chosen, pdb)
        return out

    # the handlers' questions
    def filter(self, pod: dict, ask: PodAsk, names: list[str]) -> tuple[list[str], dict[str, str]]:
        """Every node's answer, reserving nothing (pods without a card to choose)."""
        with self.lock:
            fits, failed = fitting_nodes(pod, ask, names, self.pods.state, self.config)
        return list(fits), failed

    def scores(self, pod: dict, ask: PodAsk, names: list[str]) -> list[tuple[str, int]]:
        with self.lock:
            return scores(pod, ask, names, self.pods.state, self.config)

    def in_doubt(self, uid: str) -> bool:
        """Whether an earlier binding of the pod is under way or its outcome unknown."""
        with self.lock:
            return uid in self.pods.assumed or uid in self.pods.uncertain

    def choose_and_assume(self, pod: dict, ask: PodAsk, node: str) -> Placement | str | None:
        """The cards on `node` chosen on the state that counts every share chosen before, and
        counted at once (before the write: never handed out twice); or why they do not fit;
        None if a binding of the pod is being written right now."""
        uid = pod["metadata"]["uid"]
        with self.lock:
            if uid in self.pods.in_flight:
                return None
            result = choose(pod, ask, node, self.pods.state, self.config)
            if not isinstance(result, str):
                self.pods.assume(result.share)
            return result

    def bind_ok(self, share: PodShare, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.bind_ok(share)
            if self.pods.assumed.get(share.uid) is share:  # not seen bound yet
                self.written[share.uid] = (namespace, name)

    def bind_failed(self, share: PodShare, pod: dict) -> None:
        with self.lock:
            self.pods.bind_failed(share, pod)

    def bind_unknown(self, share: PodShare, namespace: str, name: str) -> None:
        with self.lock:
            self.pods.bind_unknown(share, namespace, name)

    def read_pod(self, namespace: str, name: str) -> tuple[int, dict | None]:
        """A fresh GET (outside the lock): (HTTP status, pod or None); (0, None) if unreachable."""
        if self.api is None:
            return 0, None
        return read_pod(self.api, namespace, name)

    def resolve(self, uid: str, namespace: str, name: str) -> tuple[str, int, dict | None]:
        """Read a pod and learn from it: ("bound" | "unbound" | "gone" | "unknown", status, pod)."""
        status, pod = self.read_pod(namespace, name)
        return self.learn(uid, status, pod), status, pod

    def learn(self, uid: str, status: int, pod: dict | None) -> str:
        """What a fresh read of a pod (HTTP status, pod or None) tells of its binding:
        "bound" | "unbound" | "gone" | "unknown"."""
        with self.lock:
            return self.pods.resolved(uid, status, pod)


def _facts(pod: dict) -> PodFacts:
    return PodFacts(pod_priority(pod), bool((pod.get("metadata") or {}).get("deletionTimestamp")))
