"""The API client (webhook/kube/api.py) against a few lines of HTTP on 127.0.0.1: what it sends
(path, query, body, the Authorization header), how often it asks the configuration for that
header, that it keeps connections alive and copes with the server closing them, its bound on
connections, its errors and timeouts, the TLS settings it takes from the configuration, and a
proxy: an http server with the whole URL on the request line, an https server through a CONNECT
tunnel (a tiny proxy on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

import pytest
from kubernetes import client

import webhook.kube.api as api_module
from tests.harness.kube import free_ports
from tests.kube.recorder import Recorder, api_for, serve
from webhook.kube.api import AUTH_EVERY, Api, ApiError, ssl_context


def run(coro):
    return asyncio.run(coro)


def test_a_call_sends_the_path_query_body_and_token(server):
    api = api_for(server.server_port)

    async def calls():
        first = await api.call("POST", "/api/v1/namespaces/a/pods/p/binding", {"fieldSelector": "x!=y,z"},
                               body={"kind": "Binding", "target": {"name": "n1"}})
        second = await api.call("GET", "/y")
        return first, second

    first, second = run(calls())
    assert (first.status, first.body["message"], first.ok) == (201, "made", True)
    assert second.status == 201
    one, two = Recorder.seen
    assert {k: one[k] for k in ("method", "path", "auth", "type", "body")} == {
        "method": "POST", "auth": "Bearer first", "type": "application/json",
        "path": "/api/v1/namespaces/a/pods/p/binding?fieldSelector=x%21%3Dy%2Cz",
        "body": {"kind": "Binding", "target": {"name": "n1"}}}
    assert (two["method"], two["path"], two["type"], two["body"]) == ("GET", "/y", None, None)
    assert one["port"] == two["port"]  # one connection, kept alive


def test_a_patch_carries_the_content_type_asked_for(server):
    patch = {"metadata": {"annotations": {"a": "1"}}}
    for api in (api_for(server.server_port), Api(_proxied(server))):
        run(api.call("PATCH", "/api/v1/namespaces/a/pods/p", body=patch,
                     content_type="application/merge-patch+json"))
    direct, proxied = Recorder.seen
    for seen in (direct, proxied):
        assert (seen["method"], seen["type"], seen["body"]) == ("PATCH", "application/merge-patch+json", patch)


def test_the_token_is_read_again_after_auth_every_seconds(server, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(api_module.time, "monotonic", lambda: clock[0])
    api = api_for(server.server_port)
    asked = []
    hook = lambda cfg: asked.append(1)  # noqa: E731  (the loaders' refresh hook runs per ask)
    api.configuration.refresh_api_key_hook = hook

    async def calls():
        await api.call("GET", "/a")
        api.configuration.api_key = {"authorization": "Bearer rotated"}
        clock[0] += AUTH_EVERY - 0.1
        await api.call("GET", "/b")
        clock[0] += 0.2
        await api.call("GET", "/c")
        await api.call("GET", "/d")

    run(calls())
    assert [s["auth"] for s in Recorder.seen] == \
        ["Bearer first", "Bearer first", "Bearer rotated", "Bearer rotated"]
    assert len(asked) == 2


@pytest.mark.parametrize("closing", ["/close", "/hangup"])
def test_a_connection_the_server_closes_is_not_reused(server, closing):
    """/close says so in its answer; /hangup closes silently after a kept-alive answer."""
    api = api_for(server.server_port)

    async def calls():
        replies = [await api.call("GET", closing)]
        await asyncio.sleep(0.1)  # the close reaches the client
        replies.append(await api.call("GET", "/after"))
        return replies

    assert [r.status for r in run(calls())] == [201, 201]
    before, after = Recorder.seen
    assert before["port"] != after["port"]


def test_calls_at_once_share_at_most_the_connections_allowed(server):
    api = Api(api_for(server.server_port).configuration, connections=2)

    async def calls():
        return await asyncio.gather(*(api.call("GET", f"/p{i}") for i in range(12)))

    assert [r.status for r in run(calls())] == [201] * 12
    assert len({s["port"] for s in Recorder.seen}) <= 2
    assert sorted(s["path"] for s in Recorder.seen) == sorted(f"/p{i}" for i in range(12))


def test_each_event_loop_has_connections_of_its_own(server):
    """A connection belongs to the loop that opened it: another loop opens its own."""
    api = api_for(server.server_port)
    assert run(api.call("GET", "/a")).status == 201
    assert run(api.call("GET", "/b")).status == 201
    assert len({s["port"] for s in Recorder.seen}) == 2


def test_unreachable_broken_and_slow_answers_are_api_errors(server):
    (closed,) = free_ports(1)  # nothing listens there
    with pytest.raises(ApiError, match=r"GET /a: ") as refused:
        run(api_for(closed).call("GET", "/a", timeout=2))
    assert refused.value.reason == "Connection refused"
    api = api_for(server.server_port)

    async def calls():
        with pytest.raises(ApiError, match=r"GET /broken: "):
            await api.call("GET", "/broken", timeout=2)
        with pytest.raises(ApiError, match=r"GET /slow: TimeoutError"):
            await api.call("GET", "/slow", timeout=0.2)
        return await api.call("GET", "/fine")  # neither broken connection is used again

    assert run(calls()).status == 201
    assert len({s["port"] for s in Recorder.seen}) == 3


def test_an_http_server_through_a_proxy_gets_the_whole_url_on_the_request_line(server):
    reply = run(Api(_proxied(server)).call("GET", "/api/v1/nodes"))
    assert reply.status == 201
    (seen,) = Recorder.seen
    assert seen["path"] == "http://apiserver.invalid:6443/api/v1/nodes"  # a proxy's request line


def _proxied(server) -> client.Configuration:
    """A configuration that sends every call through a proxy: the recorder."""
    cfg = client.Configuration(host="http://apiserver.invalid:6443")
    cfg.proxy = f"http://127.0.0.1:{server.server_port}"
    return cfg



class TlsServer(NamedTuple):
    server: ThreadingHTTPServer
    ca_file: str

@pytest.fixture
def tls_server(tmp_path):
    """The recorder behind TLS, with a certificate for apiserver.invalid (made by the `certs`
    command), and the CA file that trusts it."""
    subprocess.run([str(Path(sys.executable).parent / "mthreads-webhook"), "certs", "--out",
                    str(tmp_path), "--service", "apiserver", "--namespace", "invalid"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    srv = serve()
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    yield TlsServer(srv, str(tmp_path / "ca.crt"))
    srv.shutdown()
    srv.server_close()


class ConnectProxy:
    """A CONNECT proxy on 127.0.0.1 that takes apiserver.invalid for 127.0.0.1 and records the
    request lines and headers it is sent; `refuse`: answer 403 instead."""

    def __init__(self, refuse: bool = False):
        self.refuse, self.seen = refuse, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return conn.close()
            head += chunk
        self.seen.append(head.decode().split("\r\n\r\n")[0].split("\r\n"))
        method, authority, _ = self.seen[-1][0].split(" ")
        host, port = authority.rsplit(":", 1)
        if self.refuse or method != "CONNECT" or host != "apiserver.invalid":
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return conn.close()
        upstream = socket.create_connection(("127.0.0.1", int(port)))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.sock.close()


def _tunnelled(port: int, ca_file: str, proxy: ConnectProxy) -> Api:
    cfg = client.Configuration(host=f"https://apiserver.invalid:{port}")
    cfg.ssl_ca_cert = ca_file
    cfg.api_key = {"authorization": "Bearer first"}
    cfg.proxy = f"http://127.0.0.1:{proxy.port}"
    cfg.proxy_headers = {"Proxy-Authorization": "Basic dXNlcjpwYXNz"}
    return Api(cfg)


def test_an_https_server_through_a_proxy_is_reached_through_a_connect_tunnel(tls_server):
    server, ca_file = tls_server
    proxy = ConnectProxy()
    try:
        api = _tunnelled(server.server_port, ca_file, proxy)

        async def calls():
            first = await api.call("POST", "/api/v1/namespaces/a/pods/p/binding",
                                   body={"kind": "Binding"})
            second = await api.call("GET", "/y")
            watched = await api.watch("/api/v1/pods", {"watch": "true"}, 5.0, lambda line: True)
            return first, second, watched

        first, second, watched = run(calls())
        assert (first.status, first.body["message"]) == (201, "made")
        assert (second.status, watched.status) == (201, 201)
        call, watch = proxy.seen  # the two calls share one tunnel; the watch has its own
        for head in (call, watch):
            assert head[0] == f"CONNECT apiserver.invalid:{server.server_port} HTTP/1.1"
            assert "Proxy-Authorization: Basic dXNlcjpwYXNz" in head
        paths = [(s["method"], s["path"], s["auth"]) for s in Recorder.seen]
        assert paths == [("POST", "/api/v1/namespaces/a/pods/p/binding", "Bearer first"),
                         ("GET", "/y", "Bearer first"),
                         ("GET", "/api/v1/pods?watch=true", "Bearer first")]
    finally:
        proxy.close()


def test_a_tunnel_the_proxy_refuses_is_an_api_error(tls_server):
    server, ca_file = tls_server
    proxy = ConnectProxy(refuse=True)
    try:
        with pytest.raises(ApiError, match="the proxy refused the tunnel: HTTP/1.1 403"):
            run(_tunnelled(server.server_port, ca_file, proxy).call("GET", "/a", timeout=5))
        assert not Recorder.seen
    finally:
        proxy.close()


@pytest.mark.parametrize("verify, assert_hostname, checks, mode", [
    (True, None, True, ssl.CERT_REQUIRED),
    (True, False, False, ssl.CERT_REQUIRED),
    (False, None, False, ssl.CERT_NONE),
])
def test_tls_settings_follow_the_configuration(verify, assert_hostname, checks, mode):
    cfg = client.Configuration(host="https://127.0.0.1:6443")
    cfg.verify_ssl, cfg.assert_hostname = verify, assert_hostname
    ctx = ssl_context(cfg)
    assert (ctx.check_hostname, ctx.verify_mode) == (checks, mode)


def test_tls_server_name_and_port_come_from_the_configuration():
    cfg = client.Configuration(host="https://127.0.0.1:6443/prefix")
    cfg.tls_server_name = "kubernetes.default"
    api = Api(cfg)
    assert (api.host, api.port, api.prefix, api.server_hostname) == \
        ("127.0.0.1", 6443, "/prefix", "kubernetes.default")
    assert api.ssl is not None


def test_a_configured_ca_is_the_only_one_trusted(tls_server):
    """As urllib3 and client-go: the CA the configuration names, without the system's store
    (which also took 20 ms of every start); the system's store when none is named."""
    _, ca_file = tls_server
    cfg = client.Configuration(host="https://127.0.0.1:6443")
    cfg.ssl_ca_cert = ca_file
    assert ssl_context(cfg).cert_store_stats()["x509_ca"] == 1
    cfg.ssl_ca_cert, cfg.ca_cert_data = None, Path(ca_file).read_text()
    assert ssl_context(cfg).cert_store_stats()["x509_ca"] == 1
    cfg.ca_cert_data = None
    system = ssl.create_default_context().cert_store_stats()["x509_ca"]
    assert ssl_context(cfg).cert_store_stats()["x509_ca"] == system
