"""The thin JSON client (webhook/kube/api.py) against a few lines of HTTP on 127.0.0.1: what it
sends (path, query, body, the Authorization header), how often it asks the configuration for
that header, and what a server that cannot be reached or that breaks off its answer gives."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from tests.harness.kube import free_ports
import webhook.kube.api as api_module
from webhook.kube.api import AUTH_EVERY, Api, ApiError


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[dict] = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        Recorder.seen.append({"method": self.command, "path": self.path,
                              "auth": self.headers.get("Authorization"),
                              "type": self.headers.get("Content-Type"),
                              "body": json.loads(body) if body else None})
        if self.path.startswith("/broken"):  # promises more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"kind":')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        out = json.dumps({"kind": "Status", "message": "made"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PATCH = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Recorder.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def api_for(port: int, token: str = "first") -> Api:
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return Api(client.ApiClient(cfg))


def test_a_call_sends_the_path_query_body_and_token(server):
    api = api_for(server.server_port)
    reply = api.call("POST", "/api/v1/namespaces/a/pods/p/binding", {"fieldSelector": "x!=y,z"},
                     body={"kind": "Binding", "target": {"name": "n1"}})
    assert (reply.status, reply.body["message"], reply.ok) == (201, "made", True)
    (seen,) = Recorder.seen
    assert seen == {"method": "POST", "auth": "Bearer first", "type": "application/json",
                    "path": "/api/v1/namespaces/a/pods/p/binding?fieldSelector=x%21%3Dy%2Cz",
                    "body": {"kind": "Binding", "target": {"name": "n1"}}}
    api.call("PATCH", "/x", body={"a": 1}, content_type="application/merge-patch+json")
    api.call("GET", "/y")
    assert [(s["type"], s["body"]) for s in Recorder.seen[1:]] == \
        [("application/merge-patch+json", {"a": 1}), (None, None)]


def test_the_token_is_read_again_after_auth_every_seconds(server, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(api_module.time, "monotonic", lambda: clock[0])
    api = api_for(server.server_port)
    asked = []
    hook = lambda cfg: asked.append(1)  # noqa: E731  (the loaders' refresh hook runs per ask)
    api.api_client.configuration.refresh_api_key_hook = hook
    api.call("GET", "/a")
    api.api_client.configuration.api_key = {"authorization": "Bearer rotated"}
    clock[0] += AUTH_EVERY - 0.1
    api.call("GET", "/b")
    clock[0] += 0.2
    api.call("GET", "/c")
    api.call("GET", "/d")
    assert [s["auth"] for s in Recorder.seen] == \
        ["Bearer first", "Bearer first", "Bearer rotated", "Bearer rotated"]
    assert len(asked) == 2


def test_an_unreachable_server_or_a_broken_answer_is_an_api_error(server):
    (closed,) = free_ports(1)  # nothing listens there
    with pytest.raises(ApiError, match=r"GET /a: .*"):
        api_for(closed).call("GET", "/a", timeout=2)
    with pytest.raises(ApiError, match=r"GET /broken: "):
        api_for(server.server_port).call("GET", "/broken", timeout=2)
