"""Entry point: the node/pod cache and the extender app (asgi.py) under uvicorn, one process.

One process: the cache and the assumed shares are that process's memory, and every card
decision must see every other one. uvicorn on uvloop with httptools, not gunicorn's threads
as for the webhook (docs/serving.md): kube-scheduler waits for each /filter answer before it
takes the next pod, so the CPU the extender spends per pod sets the pace of the whole path.
On one event loop a filter is answered in one go, with no hand-off between threads, and a
bind's write is one more request on the same loop (kube/async_api.py). The extender's CPU
per pod fell from 3.4 ms under gunicorn's gthread and Flask to 1.0-1.2 ms, in bench runs on
one machine (docs/benchmarks.md, "Extender path").
uvicorn keeps kube-scheduler's connections alive, stops gracefully on SIGTERM, and costs a
slow client a socket, not a thread. Plain HTTP: kube-scheduler reaches it on the pod network
or loopback (see docs/extender.md).
"""

from __future__ import annotations

import logging
import signal
import socket

import uvicorn

from ..bind_address import listen_address
from ..config import Config
from ..kube.api import Api, make_api_client
from ..kube.async_api import AsyncApi
from ..observe.hami_metrics import metrics_page
from .asgi import ExtenderApp
from .cache import Cache
from .verbs import Extender

log = logging.getLogger("webhook.extender")

KEEPALIVE = 120  # seconds; above Go's 90 s IdleConnTimeout
MAX_CONNECTIONS = 1000  # open at once; more are answered 503 (each costs a descriptor)
GRACE = 10  # seconds the requests under way get after SIGTERM


def server(config: Config, api: Api) -> tuple[uvicorn.Server, Cache]:
    """The uvicorn server of the extender app over a started cache (not yet serving)."""
    cache = Cache(config, api).start()
    app = ExtenderApp(Extender(config, cache, AsyncApi(api)),
                      metrics_page(lambda: cache.state.nodes.values(), cache.bound))
    settings = uvicorn.Config(
        app, loop="uvloop", http="httptools", lifespan="on", log_config=None, access_log=False,
        proxy_headers=False, server_header=False, timeout_keep_alive=KEEPALIVE,
        limit_concurrency=MAX_CONNECTIONS, timeout_graceful_shutdown=GRACE)
    return uvicorn.Server(settings), cache


def run(config: Config, kubeconfig: str | None, bind: str) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    family, address = listen_address("--bind", bind)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    srv, cache = server(config, Api(make_api_client(kubeconfig)))
    log.info("extender: scheduler %s, listening on %s, listing nodes and pods",
             config.scheduler_name, bind)
    # uvicorn stops on SIGTERM/SIGINT, then raises the signal again under the handlers it
    # found: with these that is a clean exit (0), as for the webhook and the allocator.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        srv.run(sockets=[sock])
    finally:
        cache.stop()
        sock.close()
    return 0
