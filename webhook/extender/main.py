"""Entry point: the node/pod cache and the extender app (app.py) on its HTTP server
(http_server.py), one process, one event loop (uvloop).

One process: the cache and the assumed shares are that process's memory, and every card
decision must see every other one. One event loop, not gunicorn's threads as for the webhook
(docs/serving.md): kube-scheduler waits for each /filter answer before it takes the next pod,
so the CPU the extender spends per pod sets the pace of the whole path. On one event loop a
filter is answered in one go, with no hand-off between threads, and a bind's write is one
more request on the same loop (kube/api.py). Plain HTTP on loopback only: the verbs
reserve and bind for whoever calls them, so only the kube-scheduler in the same pod may reach
them (docs/extender.md); `--metrics-bind` adds a listener for the pages alone (Prometheus, the
kubelet's probes).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from functools import partial
from typing import Callable

import uvloop
from prometheus_client import CollectorRegistry

from ..base.listen import listen_address, take
from ..kube.api import Api
from ..kube.informer import Informer
from ..metrics.annotation_metrics import IgnoredAnnotationsCollector
from ..metrics.hami_metrics import metrics_page
from ..model.config import Config
from .app import READY_WAIT, ExtenderApp
from .cache import Cache
from .http_server import HttpServer
from .verbs import Extender

log = logging.getLogger("webhook.extender")

# The cache's objects live as long as the process, a request's objects die young (a filter
# decodes a pod and hundreds of node names). With Python's defaults its collector walked the
# cache again and again: 7% of the extender's CPU in a bench backlog (perf). So: young
# collections less often, and what the first list built frozen out of the collections.
GC_YOUNG = 20_000  # allocations between young collections (Python's default: 700)


def build(config: Config, api: Api) -> tuple[ExtenderApp, Cache]:
    """The extender app over its cache, whose watches `answer_until_stopped` runs on its loop."""
    cache = Cache(config)
    return app_over(config, cache, api), cache


def app_over(config: Config, cache: Cache, api, ready_wait: float = READY_WAIT) -> ExtenderApp:
    """The extender app on `cache`, its /metrics with the count of objects that raised and of
    the node annotations ignored."""
    registry = CollectorRegistry()
    page = metrics_page(cache.snapshot, IgnoredAnnotationsCollector(cache.ignored_counts),
                        registry=registry)
    return ExtenderApp(Extender(config, cache, api, registry), page, ready_wait=ready_wait)


async def answer_until_stopped(application: ExtenderApp, cache: Cache, sock: socket.socket,
                               pages_sock: socket.socket | None = None) -> None:
    """Answer on `sock` (and the pages alone on `pages_sock`) until SIGTERM or SIGINT, then
    stop gracefully."""
    servers = [HttpServer(application.respond)]
    if pages_sock is not None:
        servers.append(HttpServer(application.respond_pages))
    for server, listening in zip(servers, (sock, pages_sock)):
        await server.start(listening)
    ext = application.ext
    watches = [asyncio.ensure_future(Informer(ext.api, kind, path, selector,
                                              partial(ext.index, kind)).run())
               for kind, path, selector in cache.watched()]
    watches.append(asyncio.ensure_future(ext.tend()))
    freeze = asyncio.ensure_future(_freeze_when_listed(cache.wait_ready))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("extender: stopping")
    for task in (freeze, *watches):
        task.cancel()
    for server in servers:
        await server.close()


async def _freeze_when_listed(wait_ready: Callable[[float], bool]) -> None:
    """gc.freeze once `wait_ready(seconds)` says the first list is done (waited for on the
    loop's default threads, not the app's)."""
    loop = asyncio.get_running_loop()
    while not await loop.run_in_executor(None, wait_ready, 5.0):
        pass
    gc.collect()
    gc.freeze()


def run(config: Config, kubeconfig: str | None, bind: str, metrics_bind: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    sock = take(bind) or _listening("--bind", bind)
    pages_sock = _listening("--metrics-bind", metrics_bind) if metrics_bind else None
    gc.set_threshold(GC_YOUNG)
    application, cache = build(config, Api.from_kubeconfig(kubeconfig))
    log.info("extender: scheduler %s, listening on %s%s, listing nodes and pods",
             config.scheduler_name, bind, f" (pages on {metrics_bind})" if metrics_bind else "")
    try:
        uvloop.run(answer_until_stopped(application, cache, sock, pages_sock))
    finally:
        application.close()
        for s in (sock, pages_sock):
            if s is not None:
                s.close()
    return 0


def _listening(flag: str, value: str) -> socket.socket:
    family, address = listen_address(flag, value)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    return sock
