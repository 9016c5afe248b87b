"""Entry point: wire the API client, Lease, metrics and decision loop; stop cleanly on SIGTERM.

Decisions are made on this thread (loop.py); the Kubernetes I/O (watches, bindings, re-reads,
reports, the Lease) runs on the process's I/O loop (kube/io_loop.py), one thread."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid

from ..kube.api import Api
from ..kube.binder import DEFAULT_WRITES
from ..kube.leader import LeaderElector
from ..metrics.allocator_metrics import Metrics, serve_metrics
from ..metrics.annotation_metrics import IgnoredAnnotationsCollector
from ..metrics.hami_metrics import HamiCollector
from ..metrics.pending_metrics import PendingCollector
from ..model.config import Config
from .loop import Allocator

log = logging.getLogger("webhook.allocator")

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
DEFAULT_NAMESPACE = "kube-system"


def lease_namespace(namespace: str | None) -> str:
    if namespace:
        return namespace
    try:
        with open(SA_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or DEFAULT_NAMESPACE
    except OSError:
        return DEFAULT_NAMESPACE


def identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def run(config: Config, kubeconfig: str | None, namespace: str | None, metrics_bind: str,
        bind_threads: int | None = None) -> int:
    bind_threads = bind_threads or DEFAULT_WRITES  # the bindings and re-reads under way at once
    # beside the binder's requests, the Lease's and the reports' (the watches have their own)
    api = Api.from_kubeconfig(kubeconfig, connections=bind_threads + 4)
    me = identity()
    ns = lease_namespace(namespace)
    metrics = Metrics()
    leader = LeaderElector(api, ns, me)
    allocator = Allocator(config, api, leader, metrics, me, bind_threads)
    metrics.registry.register(HamiCollector(lambda: allocator.cache.snapshot()))
    metrics.registry.register(PendingCollector(lambda: allocator.queue.pods()))
    metrics.registry.register(IgnoredAnnotationsCollector(lambda: allocator.ignored.counts))
    server = serve_metrics(metrics, metrics_bind,
                   healthy=lambda: time.monotonic() - allocator.heartbeat < 30)
    stop_leading = threading.Event()

    def on_term(signum, frame):
        log.info("signal %d: stopping", signum)
        allocator.stop.set()
        leader.changed.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    elector = threading.Thread(target=leader.run, args=(stop_leading,), name="lease", daemon=True)
    elector.start()
    log.info("allocator %s: scheduler %s, lease %s/mthreads-allocator, metrics on %s",
             me, config.scheduler_name, ns, metrics_bind)
    try:
        allocator.run()
    finally:
        stop_leading.set()
        elector.join(timeout=5)
        leader.release()
        server.shutdown()
    log.info("stopped")
    return 0
