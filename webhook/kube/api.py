"""A thin JSON-over-HTTP client on top of the kubernetes client's connection and auth.

The typed models cost 10-15 ms of CPU per pod and the typed binding call raises on the
Status a successful binding returns, so every call here sends and parses JSON itself, on the
client's urllib3 pool (its TLS settings and proxy). The Authorization header is asked of the
client's configuration once per `AUTH_EVERY` seconds, not per call: its refresh hook re-reads
the whole environment for proxies each time it runs (75 µs a call here, some 7% of the CPU
of an extender's bind). The cost: a token that expires is still sent for up to `AUTH_EVERY`
seconds (the in-cluster loader re-reads its token only once a minute anyway, and the kubelet
rotates that token long before it expires).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlencode

import urllib3
from kubernetes import client
from kubernetes import config as kube_config

from ..startup import StartupError

REQUEST_TIMEOUT = 5.0  # seconds, for every call that is not a watch
AUTH_EVERY = 10.0  # seconds between two reads of the Authorization header from the configuration


@dataclass
class Reply:
    status: int
    body: dict | None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def of(cls, status: int, raw: bytes) -> "Reply":
        """The reply to a JSON request: a body that is not a JSON object is None."""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return cls(status, parsed if isinstance(parsed, dict) else None)

    def message(self) -> str:
        if isinstance(self.body, dict) and self.body.get("message"):
            return f"{self.status} {self.body['message']}"
        return str(self.status)


class ApiError(Exception):
    """The API server could not be reached (connection refused, timeout, TLS...)."""


def client_configuration(kubeconfig: str | None, description: str | None = None) -> client.Configuration:
    """The client settings of a kubeconfig (a file or a colon-separated list; None: in-cluster).
    A source the loader cannot use is a StartupError naming it (`description`, else the path)."""
    cfg = client.Configuration()
    try:
        if kubeconfig:
            kube_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg,
                                         persist_config=False)
        else:
            kube_config.load_incluster_config(client_configuration=cfg)
    except Exception as e:  # the loader raises many kinds for a file it cannot use
        where = description or (f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster config")
        raise StartupError(f"{where}: cannot use it: {e}") from None
    return cfg


def make_api_client(kubeconfig: str | None, connections: int = 10) -> client.ApiClient:
    """`connections`: kept open at once; a thread that finds none free opens (and drops) one."""
    cfg = client_configuration(kubeconfig)
    cfg.connection_pool_maxsize = connections
    return client.ApiClient(configuration=cfg)


class Api:
    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self._auth: tuple[float, dict[str, str]] = (float("-inf"), {})
        self._auth_lock = threading.Lock()

    def auth_headers(self) -> dict[str, str]:
        at, headers = self._auth
        if time.monotonic() - at < AUTH_EVERY:
            return headers
        with self._auth_lock:
            headers = {}  # what param_serialize would add for the BearerToken setting
            for setting in self.api_client.configuration.auth_settings().values():
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
            self._auth = (time.monotonic(), headers)
        return headers

    def _send(self, method: str, path: str, query: dict | None, body, content_type: str | None,
              timeout):
        headers = {"Accept": "application/json", **self.auth_headers()}
        if content_type:
            headers["Content-Type"] = content_type
        url = self.api_client.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1]) \
            if isinstance(timeout, tuple) else urllib3.Timeout(total=timeout)
        try:
            return self.api_client.rest_client.pool_manager.request(
                method, url, body=None if body is None else json.dumps(body).encode(),
                headers=headers, timeout=timeout, preload_content=False)
        except Exception as e:  # urllib3 raises many kinds; all mean "not reached"
            raise ApiError(f"{method} {path}: {type(e).__name__}: {e}") from None

    def call(self, method: str, path: str, query: dict | None = None, body=None,
             content_type: str | None = "application/json", timeout=REQUEST_TIMEOUT) -> Reply:
        resp = self._send(method, path, query, body, content_type if body is not None else None,
                          timeout)
        try:
            raw = resp.data
        except Exception as e:  # the answer broke off: as good as not reached
            raise ApiError(f"{method} {path}: {type(e).__name__}: {e}") from None
        finally:
            resp.release_conn()
        return Reply.of(resp.status, raw)

    def stream(self, path: str, query: dict, read_timeout: float):
        """A watch: the raw response, to read line by line; the caller closes it.

        `read_timeout` bounds each read: a connection that a middlebox dropped without a
        word would otherwise keep the watch waiting for ever, blind to new pods.
        """
        return self._send("GET", path, query, None, None, (REQUEST_TIMEOUT, read_timeout))
