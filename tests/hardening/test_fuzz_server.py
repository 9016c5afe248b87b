"""Fuzzing the real server (`mthreads-webhook serve`: gunicorn, TLS) with fewer cases.

The same bodies as test_fuzz_http over one kept-alive connection, then raw bytes on fresh
TLS connections (broken request lines, methods, headers, framing). Afterwards the worker
is the same process and never logged a crash.
"""

from __future__ import annotations

import json
import socket
import ssl

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from tests.hardening.conftest import count_case, profile
from tests.hardening.strategies import REPO, bodies, too_many_cards
from tests.hardening.test_fuzz_http import check_answer, well_formed
from tests.harness.webhook import WebhookProcess

pytestmark = pytest.mark.fuzz

MIXED = REPO / "manifests" / "overlays" / "mixed" / "config.yaml"
CRASH_SIGNS = ("Traceback", "internal error on review", "Error handling request",
               "Exception in worker", "Worker exiting", "WORKER TIMEOUT", "Booting worker")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = WebhookProcess(tmp_path_factory.mktemp("fuzz-server"), config=str(MIXED)).start()
    s.first_workers = s.workers()
    yield s
    s.stop()


def _crash_lines(server) -> list[str]:
    text = server.log()
    boots = [line for line in text.splitlines() if "Booting worker" in line]
    return [line for line in text.splitlines()
            if any(sign in line for sign in CRASH_SIGNS) and line not in boots[:1]]


@profile(scale=0.4)
@given(body=bodies(), path=st.sampled_from(["/mutate", "/validate"]))
def test_real_server_answers_every_post(server, body, path):
    raw, content_type, doc = body
    req = doc.get("request") if isinstance(doc, dict) else None
    if path == "/mutate" and isinstance(req, dict) and too_many_cards(req.get("object")):
        path = "/validate"
    count_case("server: any POST")
    try:
        resp = server.session.post(f"{server.url}{path}", data=raw, timeout=10,
                                   headers={"Content-Type": content_type} if content_type else {})
    except requests.RequestException as e:
        raise AssertionError(f"no answer from the server: {e!r}") from None
    check_answer(path, resp.status_code, resp.content, doc if resp.status_code == 200 else None)
    if content_type.split(";")[0] == "application/json" and well_formed(doc):
        assert resp.status_code == 200, f"a well-formed review got {resp.status_code}"


def _raw_exchange(server, data: bytes, wait: float = 1.0) -> bytes:
    """Send `data` on a new TLS connection; what came back until the server closed, the
    first answer's headers were in, or `wait` seconds passed (a request still incomplete)."""
    ctx = ssl.create_default_context(cafile=server.ca)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(data)
            s.settimeout(wait)
            chunks = []
            try:
                while (chunk := s.recv(65536)) and b"\r\n\r\n" not in b"".join(chunks + [chunk]):
                    chunks.append(chunk)
                chunks.append(chunk)
            except (TimeoutError, ConnectionResetError, ssl.SSLError):
                pass
            return b"".join(chunks)


METHODS = st.sampled_from([b"POST", b"GET", b"PUT", b"DELETE", b"OPTIONS", b"HEAD", b"PATCH",
                           b"TRACE", b"CONNECT", b"PRI", b"post", b"P\x00ST", b""])
TARGETS = st.sampled_from([b"/mutate", b"/validate", b"/readyz", b"/metrics", b"*", b"",
                           b"http://x/mutate", b"/mutate?x=1", b"/%00", b"/../../etc/passwd",
                           b"/mutate#f", b"//mutate"])
VERSIONS = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.1x",
                            b"", b"FOO/1.1"])
HEADERS = st.lists(st.sampled_from([
    b"Content-Type: application/json", b"Content-Length: 2", b"Content-Length: -1",
    b"Content-Length: 99999999999999999999", b"Content-Length: 1, 2", b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked, identity", b"Expect: 100-continue",
    b"Host:", b"Connection: close", b"Connection: keep-alive", b"X: \x00", b"X : y", b" X: y",
    b"Upgrade: h2c", b"HTTP2-Settings: AAMAAABkAAQAAP__", b"Content-Type: text/plain"]), max_size=6)


@profile(scale=0.2)
@given(method=METHODS, target=TARGETS, version=VERSIONS, headers=HEADERS,
       body=st.one_of(st.just(b"{}"), st.binary(max_size=64),
                      st.just(b"5\r\n{}{}{\r\n0\r\n\r\n"), st.just(b"zz\r\n")),
       junk=st.binary(max_size=16))
def test_real_server_survives_malformed_http(server, method, target, version, headers, body, junk):
    count_case("server: malformed HTTP")
    data = b" ".join(p for p in (method, target, version) if p) + b"\r\n" + \
        b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body + junk
    answer = _raw_exchange(server, data)
    if answer:
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/1."), status_line
        code = int(status_line.split()[1])
        assert code < 500, f"{data!r} -> {answer[:300]!r}"
    assert server.session.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_deep_and_huge_bodies_on_the_real_server(server):
    deep = b"[" * 200_000 + b"]" * 200_000
    statuses = []
    for raw in (deep, b'{"a": ' + deep + b"}", b'"' + b"x" * (6 << 20) + b'"',
                json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                            "request": {"uid": "u", "operation": "CREATE", "object": {
                                "kind": "Pod", "metadata": {"annotations": {
                                    f"k{i}": "v" for i in range(200_000)}},
                                "spec": {"containers": [{"name": f"c{i}"} for i in range(20_000)]}}}}
                           ).encode()):
        resp = server.session.post(f"{server.url}/mutate", data=raw, timeout=30,
                                   headers={"Content-Type": "application/json"})
        statuses.append(resp.status_code)
    assert server.workers() == server.first_workers
    assert all(s < 500 for s in statuses), statuses


def test_the_worker_never_died_nor_logged_a_crash(server):
    """Runs after the properties above (same module, in order)."""
    assert server.proc.poll() is None
    assert server.workers() == server.first_workers, "the gunicorn worker was replaced"
    assert server.session.get(f"{server.url}/healthz", timeout=5).status_code == 200
    assert _crash_lines(server) == []
