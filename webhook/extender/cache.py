"""The extender's cache: the shared pod cache (scheduling/cache.py) behind one lock, fed by
the watches, with the few questions the HTTP handlers ask of it.

kube-scheduler sends node names only, so the extender keeps the nodes and the bound pods'
shares itself (it is node-cache capable). The handlers run on gunicorn's threads and the
watch events are applied on this cache's thread; every read and change of the pod cache
happens inside one method here, under the lock; the API calls are made outside it.
"""

from __future__ import annotations

import queue
import threading
import time

from ..config import Config
from ..kube.api import Api
from ..kube.binder import read_pod
from ..kube.informer import Informer, watch_cluster
from ..scheduling.cache import PodCache
from ..scheduling.decide import Placement
from ..scheduling.request import PodAsk
from ..scheduling.shares import PodShare
from .decisions import choose, filter_nodes, scores

RESOLVE_EVERY = 5.0  # seconds between re-reads of pods whose binding outcome is unknown


class Cache:
    """The state source of the extender app. `start()` runs the watches; tests may instead
    feed `apply()` by hand."""

    def __init__(self, config: Config, api: Api | None = None):
        self.config, self.api = config, api
        self.lock = threading.RLock()
        self.pods = PodCache(config.mthreads)
        self.bound = self.pods.bound  # the bound pods' cards, for HAMi's metrics
        self.events: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        self._informers: list[Informer] = []
        self._thread: threading.Thread | None = None

    @property
    def state(self):
        return self.pods.state

    # lifecycle
    def start(self) -> "Cache":
        assert self.api is not None
        self._informers = watch_cluster(self.api, self.events, 1)
        self._thread = threading.Thread(target=self._run, name="extender-cache", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        for i in self._informers:
            i.stop()

    def ready(self) -> bool:
        with self.lock:
            return self.pods.ready

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
            if time.monotonic() - last_resolve > RESOLVE_EVERY:
                last_resolve = time.monotonic()
                with self.lock:
                    uncertain = list(self.pods.uncertain.items())
                for uid, (ns, name) in uncertain:
                    self.resolve(uid, ns, name)

    def apply(self, kind: str, event: str, obj) -> None:
        with self.lock:
            self.pods.apply(kind, event, obj)

    # the handlers' questions
    def filter(self, pod: dict, ask: PodAsk, names: list[str]) -> tuple[list[str], dict[str, str]]:
        with self.lock:
            return filter_nodes(pod, ask, names, self.pods.state, self.config)

    def scores(self, pod: dict, ask: PodAsk, names: list[str]) -> list[tuple[str, int]]:
        with self.lock:
            return scores(pod, ask, names, self.pods.state, self.config)

    def pending_pod(self, uid: str, namespace: str, name: str) -> tuple[dict | None, bool]:
        """(the cached unbound pod or None, whether an earlier binding of it is in doubt)."""
        with self.lock:
            pod = self.pods.pending.get(uid)
            doubt = uid in self.pods.assumed or uid in self.pods.uncertain
        if pod is not None and (pod["metadata"].get("namespace"), pod["metadata"].get("name")) \
                != (namespace, name):
            pod = None
        return pod, doubt

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

    def bind_ok(self, share: PodShare) -> None:
        with self.lock:
            self.pods.bind_ok(share)

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
        with self.lock:
            return self.pods.resolved(uid, status, pod), status, pod
