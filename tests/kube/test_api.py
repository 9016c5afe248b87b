"""The thin JSON client (webhook/kube/api.py) against a few lines of HTTP on 127.0.0.1: what it
sends (path, query, body, the Authorization header), how often it asks the configuration for
that header, and what a server that cannot be reached or that breaks off its answer gives."""

from __future__ import annotations

import pytest

import webhook.kube.api as api_module
from tests.harness.kube import free_ports
from tests.kube.recorder import Recorder, api_for
from webhook.kube.api import AUTH_EVERY, ApiError


def test_a_call_sends_the_path_query_body_and_token(server):
    api = api_for(server.server_port)
    reply = api.call("POST", "/api/v1/namespaces/a/pods/p/binding", {"fieldSelector": "x!=y,z"},
                     body={"kind": "Binding", "target": {"name": "n1"}})
    assert (reply.status, reply.body["message"], reply.ok) == (201, "made", True)
    (seen,) = Recorder.seen
    del seen["port"]
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
