"""Prometheus metrics and the plain-HTTP /metrics and /healthz endpoint."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..base.listen import listen_address


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.allocated = Counter("mthreads_allocator_pods_allocated_total",
                                 "Pods bound by the allocator", registry=r)
        self.failures = Counter("mthreads_allocator_failures_total",
                                "Decisions that placed nothing, by reason", ["reason"], registry=r)
        self.decision_seconds = Histogram(
            "mthreads_allocator_decision_seconds", "Time to decide one pod", registry=r,
            buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1))
        self.bind_seconds = Histogram(
            "mthreads_allocator_bind_seconds", "Time of the pods/binding call", registry=r,
            buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
        self.card_memory = Gauge("mthreads_allocator_card_memory_allocated_mib",
                                 "Device memory handed out per card", ["node", "card"], registry=r)
        self.card_cores = Gauge("mthreads_allocator_card_cores_allocated",
                                "Core groups handed out per card", ["node", "card"], registry=r)
        self.leader = Gauge("mthreads_allocator_leader", "1 while this process holds the Lease",
                            registry=r)

    def set_cards(self, rows: list[tuple[str, str, int, int]]) -> None:
        """Replace the per-card gauges with (node, card, memory MiB, cores) rows."""
        self.card_memory.clear()
        self.card_cores.clear()
        for node, card, mem, cores in rows:
            self.card_memory.labels(node, card).set(mem)
            self.card_cores.labels(node, card).set(cores)


def serve_metrics(metrics: Metrics, bind: str, healthy) -> ThreadingHTTPServer:
    family, address = listen_address("--metrics-bind", bind)
    registry = metrics.registry

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] == "/metrics":
                body, ctype, code = generate_latest(registry), CONTENT_TYPE_LATEST, 200
            elif self.path.split("?")[0] == "/healthz":
                ok = healthy()
                body, ctype, code = (b"ok\n" if ok else b"unhealthy\n"), "text/plain", \
                    200 if ok else 503
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # no access log
            pass

    class Server(ThreadingHTTPServer):
        address_family = family  # [::1]:9090 needs an IPv6 socket
        daemon_threads = True

    server = Server(address, Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
