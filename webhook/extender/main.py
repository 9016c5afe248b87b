"""Entry point: the node/pod cache and the extender app under gunicorn, one worker.

One worker process, several threads: the cache and the assumed shares are that process's
memory, and every card decision must see every other one (two workers would each count
only their own binds). gunicorn rather than werkzeug's development server for the same
reasons as the webhook (docs/serving.md): gthread keeps kube-scheduler's connections alive,
handles SIGTERM with a graceful stop, and is the server this project already ships.
Plain HTTP: kube-scheduler reaches it on the pod network or loopback (see docs/extender.md).
"""

from __future__ import annotations

import logging

from gunicorn.app.base import BaseApplication

from ..config import Config
from ..kube.api import Api, make_api_client

log = logging.getLogger("webhook.extender")

THREADS = 8
KEEPALIVE = 120  # seconds; above Go's 90 s IdleConnTimeout


class ExtenderServer(BaseApplication):
    def __init__(self, config: Config, kubeconfig: str | None, bind: str):
        self.extender_config, self.kubeconfig, self.bind = config, kubeconfig, bind
        super().__init__()

    def load_config(self) -> None:
        settings = {
            "bind": self.bind, "workers": 1, "threads": THREADS, "worker_class": "gthread",
            "keepalive": KEEPALIVE, "timeout": 30, "graceful_timeout": 10,
            "accesslog": None, "errorlog": "-", "loglevel": "info",
            "proc_name": "mthreads-extender",
        }
        if "control_socket_disable" in self.cfg.settings:
            settings["control_socket_disable"] = True
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self):
        # In the worker, after the fork: the watch threads must live in the serving process.
        from .app import create_extender_app
        from .cache import Cache
        cache = Cache(self.extender_config, Api(make_api_client(self.kubeconfig))).start()
        log.info("extender: scheduler %s, listing nodes and pods", self.extender_config.scheduler_name)
        return create_extender_app(self.extender_config, cache)


def run(config: Config, kubeconfig: str | None, bind: str) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit code."""
    ExtenderServer(config, kubeconfig, bind).run()
    return 0
