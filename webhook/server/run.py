"""Run the Flask app under gunicorn with TLS.

Settings measured on this project's 2-core machines (see docs/serving.md):
gthread keeps the API server's connections alive; keep-alive outlasts the 90 s
idle timeout of the API server's Go client, so the server never closes a
connection just as a POST goes out on it (Go does not retry a POST, and the
API server would see EOF). Slow clients cost a descriptor, not a thread: the worker reads
the handshake and the request in its event loop (webhook/server/slow_clients.py).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

from gunicorn.app.base import BaseApplication

from ..model.config import Config
from . import slow_clients
from .tls import ServingCertificate


@dataclass(frozen=True)
class ServeOptions:
    bind: str = "0.0.0.0:8443"
    cert_file: str = "certs/tls.crt"
    key_file: str = "certs/tls.key"
    workers: int = 1
    threads: int = 4
    keepalive: int = 120  # seconds; above Go's 90 s IdleConnTimeout
    timeout: int = 30
    graceful_timeout: int = 20
    access_log: bool = False
    max_connections: int = slow_clients.MAX_CONNECTIONS  # in all; slow_clients bounds each peer


class WebhookServer(BaseApplication):
    def __init__(self, config: Config, options: ServeOptions, certificate: ServingCertificate):
        self.webhook_config = config
        self.options = options
        self.certificate = certificate
        super().__init__()

    def load_config(self) -> None:
        o = self.options
        settings = {
            "bind": o.bind, "workers": o.workers, "threads": o.threads,
            "worker_class": slow_clients.PrefetchingThreadWorker,  # gthread, requests prefetched
            "worker_connections": o.max_connections,
            "keepalive": o.keepalive, "timeout": o.timeout, "graceful_timeout": o.graceful_timeout,
            "certfile": o.cert_file, "keyfile": o.key_file,
            "ssl_context": lambda conf, default_factory:
                slow_clients.budgeted(self.certificate.context()),
            "accesslog": "-" if o.access_log else None, "errorlog": "-", "loglevel": "info",
            "proc_name": "mthreads-webhook",
        }
        if o.workers > 1:
            settings["child_exit"] = _forget_worker_metrics
        if "control_socket_disable" in self.cfg.settings:  # one per user by default: clashes
            settings["control_socket_disable"] = True
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self):
        from .app import create_app  # in the worker, after PROMETHEUS_MULTIPROC_DIR is set
        return create_app(self.webhook_config, readiness=self.certificate.status,
                          not_after=lambda: self.certificate.not_after)


def _forget_worker_metrics(server, worker) -> None:
    from prometheus_client import multiprocess
    multiprocess.mark_process_dead(worker.pid)


def serve(config: Config, options: ServeOptions) -> None:
    """Blocks until gunicorn stops; raises tls.CertificateError on unusable files."""
    certificate = ServingCertificate(options.cert_file, options.key_file)
    if options.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="mthreads-metrics-")
    WebhookServer(config, options, certificate).run()
