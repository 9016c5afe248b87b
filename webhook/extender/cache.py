"""The extender's own node and pod cache (it is node-cache capable): list+watch into ClusterState.

kube-scheduler sends node names only, so the extender keeps the nodes and the bound pods'
shares itself, with the allocator's informer and ClusterState. Everything the HTTP handlers
and the watch thread touch is guarded by one lock; the API calls are made outside it.

Shares of pods this process bound (or is binding) are "assumed": counted from the moment
the card is chosen, before the binding is written, until the watch shows the pod bound
(then its annotation counts the same share, keyed by uid, so not twice) or gone.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from ..config import Config
from ..allocator.api import Api, ApiError
from ..allocator.informer import Informer
from ..allocator.shares import PodShare, share_of
from ..allocator.state import ClusterState
from ..observe.fleet import BoundPods

log = logging.getLogger(__name__)

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
RESOLVE_EVERY = 5.0  # seconds between re-reads of pods whose binding outcome is unknown


def _uid(pod: dict) -> str:
    return pod["metadata"]["uid"]


def _key(pod: dict) -> tuple[str, str]:
    m = pod["metadata"]
    return m.get("namespace", ""), m.get("name", "")


class Cache:
    """The state source of the extender app. `start()` runs the watches; tests may instead
    feed `apply()` by hand."""

    def __init__(self, config: Config, api: Api | None = None):
        self.config, self.api = config, api
        self.lock = threading.RLock()
        self.state = ClusterState(config.mthreads)
        self.unbound: dict[tuple[str, str], dict] = {}  # (ns, name) -> a pod not bound yet
        self.assumed: dict[str, PodShare] = {}  # uid -> the share we chose, not yet seen bound
        self.in_flight: set[str] = set()  # uids whose binding write is under way
        self.uncertain: dict[str, tuple[str, str]] = {}  # uid -> (ns, name): outcome unknown
        self.synced: set[str] = set()
        self.warned: set[str] = set()
        self.bound = BoundPods()  # the bound pods' cards, for HAMi's metrics (observe/)
        self.events: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self._informers: list[Informer] = []
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> "Cache":
        assert self.api is not None
        self._informers = [
            Informer(self.api, "node", "/api/v1/nodes", None, self.events, 1).start(),
            Informer(self.api, "pod", "/api/v1/pods", LIVE_PODS, self.events, 1).start(),
        ]
        self._thread = threading.Thread(target=self._run, name="extender-cache", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        for i in self._informers:
            i.stop()

    def ready(self) -> bool:
        with self.lock:
            return self.synced >= {"node", "pod"}

    def _run(self) -> None:
        last_resolve = time.monotonic()
        while not self.stopped.is_set():
            try:
                item = self.events.get(timeout=0.5)
            except queue.Empty:
                item = None
            if item is not None:
                with self.lock:
                    self.apply(*item[1:])
                    while True:  # apply what has piled up in one go
                        try:
                            self.apply(*self.events.get_nowait()[1:])
                        except queue.Empty:
                            break
            if self.uncertain and time.monotonic() - last_resolve > RESOLVE_EVERY:
                last_resolve = time.monotonic()
                for uid, (ns, name) in list(self.uncertain.items()):
                    self.resolve(uid, ns, name)

    # watch events (call with the lock held)
    def apply(self, kind: str, event: str, obj) -> None:
        with self.lock:
            if kind == "node":
                self.state.node_event(event, obj)
            elif event == "RESET":
                self._relist(obj)
            elif event == "DELETED":
                self._gone(_uid(obj), _key(obj))
            else:
                self.seen(obj)
            if event == "RESET":
                self.synced.add(kind)

    def _relist(self, pods: list[dict]) -> None:
        keep = dict(self.assumed)
        self.state.clear_shares()
        self.bound.clear()
        self.unbound.clear()
        self.assumed.clear()
        unbound = {_uid(p) for p in pods if not (p.get("spec") or {}).get("nodeName")}
        for uid, share in keep.items():
            if uid in unbound:  # our binding is newer than the list (or still being written)
                self.assumed[uid] = share
                self.state.add(share)
        for pod in pods:
            self.seen(pod)

    def seen(self, pod: dict) -> None:
        uid, key = _uid(pod), _key(pod)
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            self.unbound.pop(key, None)
            self.assumed.pop(uid, None)
            self.uncertain.pop(uid, None)
            share = share_of(pod)
            if share.problem and uid not in self.warned:
                self.warned.add(uid)
                log.warning("pod %s/%s: %s; counting %s as fully used", *key, share.problem,
                            ", ".join(c.card for c in share.cards) or f"every card of {share.node}")
            self.state.add(share)
            self.bound.seen(pod)
            return
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.unbound.pop(key, None)
            return
        self.unbound[key] = pod

    def _gone(self, uid: str, key: tuple[str, str]) -> None:
        old = self.unbound.get(key)
        if old is not None and _uid(old) == uid:
            del self.unbound[key]
        self.assumed.pop(uid, None)
        self.uncertain.pop(uid, None)
        self.warned.discard(uid)
        self.state.remove(uid)
        self.bound.gone(uid)

    # used by the binder
    def assume(self, share: PodShare) -> None:
        with self.lock:
            self.assumed[share.uid] = share
            self.in_flight.add(share.uid)
            self.state.add(share)

    def rollback(self, share: PodShare) -> None:
        """Our write did not happen: drop the share, unless the watch has replaced it since."""
        with self.lock:
            self.in_flight.discard(share.uid)
            if self.assumed.get(share.uid) is share:
                del self.assumed[share.uid]
                self.state.remove(share.uid)

    def written(self, share: PodShare, outcome_known: bool, key: tuple[str, str]) -> None:
        with self.lock:
            self.in_flight.discard(share.uid)
            if not outcome_known and self.assumed.get(share.uid) is share:
                self.uncertain[share.uid] = key

    def read_pod(self, ns: str, name: str) -> tuple[int, dict | None]:
        """A fresh GET (outside the lock): (HTTP status, pod or None); (0, None) if unreachable."""
        if self.api is None:
            return 0, None
        try:
            reply = self.api.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except ApiError:
            return 0, None
        return reply.status, reply.body if reply.ok else None

    def resolve(self, uid: str, ns: str, name: str) -> str:
        """Learn the real state of a pod whose binding outcome is unknown.

        Returns "bound", "unbound", "gone" or "unknown" (not reachable: keep counting it)."""
        status, pod = self.read_pod(ns, name)
        with self.lock:
            if status == 404 or (pod is not None and _uid(pod) != uid):
                self._gone(uid, (ns, name))
                return "gone"
            if pod is None:
                return "unknown"
            if uid in self.in_flight:
                return "unknown"
            self.uncertain.pop(uid, None)
            if (pod.get("spec") or {}).get("nodeName"):
                self.seen(pod)
                return "bound"
            share = self.assumed.pop(uid, None)
            if share is not None:
                self.state.remove(uid)
            self.seen(pod)
            return "unbound"
