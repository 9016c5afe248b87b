"""The event-loop client of the extender's binds (webhook/kube/async_api.py) against the same
recording server as the threaded one: what it sends, that it keeps connections alive and
copes with the server closing them, its bound on connections, its errors and timeouts, the
TLS settings it takes from the configuration, and a proxied configuration going through the
threaded client."""

from __future__ import annotations

import asyncio
import ssl

import pytest
from kubernetes import client

from tests.harness.kube import free_ports
from tests.kube.recorder import Recorder, api_for
from webhook.kube.api import Api, ApiError
from webhook.kube.async_api import AsyncApi, ssl_context


def run(coro):
    return asyncio.run(coro)


def test_a_call_sends_the_path_query_body_and_token(server):
    api = AsyncApi(api_for(server.server_port))

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
    for api in (AsyncApi(api_for(server.server_port)), AsyncApi(Api(_proxied(server)))):
        run(api.call("PATCH", "/api/v1/namespaces/a/pods/p", body=patch,
                     content_type="application/merge-patch+json"))
    direct, proxied = Recorder.seen
    for seen in (direct, proxied):
        assert (seen["method"], seen["type"], seen["body"]) == ("PATCH", "application/merge-patch+json", patch)


@pytest.mark.parametrize("closing", ["/close", "/hangup"])
def test_a_connection_the_server_closes_is_not_reused(server, closing):
    """/close says so in its answer; /hangup closes silently after a kept-alive answer."""
    api = AsyncApi(api_for(server.server_port))

    async def calls():
        replies = [await api.call("GET", closing)]
        await asyncio.sleep(0.1)  # the close reaches the client
        replies.append(await api.call("GET", "/after"))
        return replies

    assert [r.status for r in run(calls())] == [201, 201]
    before, after = Recorder.seen
    assert before["port"] != after["port"]


def test_calls_at_once_share_at_most_the_connections_allowed(server):
    api = AsyncApi(api_for(server.server_port), connections=2)

    async def calls():
        return await asyncio.gather(*(api.call("GET", f"/p{i}") for i in range(12)))

    assert [r.status for r in run(calls())] == [201] * 12
    assert len({s["port"] for s in Recorder.seen}) <= 2
    assert sorted(s["path"] for s in Recorder.seen) == sorted(f"/p{i}" for i in range(12))


def test_unreachable_broken_and_slow_answers_are_api_errors(server):
    (closed,) = free_ports(1)  # nothing listens there
    with pytest.raises(ApiError, match=r"GET /a: "):
        run(AsyncApi(api_for(closed)).call("GET", "/a", timeout=2))
    api = AsyncApi(api_for(server.server_port))

    async def calls():
        with pytest.raises(ApiError, match=r"GET /broken: "):
            await api.call("GET", "/broken", timeout=2)
        with pytest.raises(ApiError, match=r"GET /slow: TimeoutError"):
            await api.call("GET", "/slow", timeout=0.2)
        return await api.call("GET", "/fine")  # neither broken connection is used again

    assert run(calls()).status == 201
    assert len({s["port"] for s in Recorder.seen}) == 3


def test_a_proxied_configuration_goes_through_the_threaded_client(server):
    reply = run(AsyncApi(Api(_proxied(server))).call("GET", "/api/v1/nodes"))
    assert reply.status == 201
    (seen,) = Recorder.seen
    assert seen["path"] == "http://apiserver.invalid:6443/api/v1/nodes"  # a proxy's request line


def _proxied(server) -> client.ApiClient:
    """A client whose configuration sends every call through a proxy: the recorder."""
    cfg = client.Configuration(host="http://apiserver.invalid:6443")
    cfg.proxy = f"http://127.0.0.1:{server.server_port}"
    return client.ApiClient(cfg)


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
    api = AsyncApi(Api(client.ApiClient(cfg)))
    assert (api.host, api.port, api.prefix, api.server_hostname) == \
        ("127.0.0.1", 6443, "/prefix", "kubernetes.default")
    assert api.ssl is not None
