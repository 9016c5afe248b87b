"""A thin JSON-over-HTTP client on top of the kubernetes client's connection and auth.

The typed models cost 10-15 ms of CPU per pod and the typed binding call raises on the
Status a successful binding returns, so every call here sends and parses JSON itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client, config as kube_config

from ..startup import StartupError

REQUEST_TIMEOUT = 5.0  # seconds, for every call that is not a watch


@dataclass
class Reply:
    status: int
    body: dict | None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

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

    def _send(self, method: str, path: str, query: dict | None, body, content_type: str | None,
              timeout):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self.api_client.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            auth_settings=["BearerToken"])
        try:  # the REST layer serializes a dict body for any JSON content type
            return self.api_client.call_api(method, url, header_params=headers, body=body,
                                            _request_timeout=timeout).response
        except Exception as e:  # urllib3 raises many kinds; all mean "not reached"
            raise ApiError(f"{method} {path}: {type(e).__name__}: {e}") from None

    def call(self, method: str, path: str, query: dict | None = None, body=None,
             content_type: str | None = "application/json", timeout=REQUEST_TIMEOUT) -> Reply:
        resp = self._send(method, path, query, body, content_type if body is not None else None,
                          timeout)
        try:
            raw = resp.data
        finally:
            resp.release_conn()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return Reply(resp.status, parsed if isinstance(parsed, dict) else None)

    def stream(self, path: str, query: dict, read_timeout: float):
        """A watch: the raw response, to read line by line; the caller closes it.

        `read_timeout` bounds each read: a connection that a middlebox dropped without a
        word would otherwise keep the watch waiting for ever, blind to new pods.
        """
        return self._send("GET", path, query, None, None, (REQUEST_TIMEOUT, read_timeout))
