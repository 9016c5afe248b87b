"""The extender's real server (http_server.py under main.py) on 127.0.0.1 against the test
API server: its answers to wrong paths, methods and bodies, kept-alive connections, a slow
client that holds no one up, and a clean exit on SIGTERM. The verbs themselves are tested
in test_handlers.py; with kube-scheduler, in test_scheduler.py."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

from tests.builders import sched_pod, slice_
from tests.harness.allocator import ALLOCATOR_USER
from tests.harness.extender import Process, start_extender


class Served(NamedTuple):
    process: Process
    host: str
    port: int


@pytest.fixture(scope="module")
def extender(kube_cluster, admin, tmp_path_factory):
    """The extender process, its host and port; stopped by PID, and must exit 0. `admin`
    grants its RBAC."""
    process, url = start_extender(kube_cluster, tmp_path_factory.mktemp("server"), ALLOCATOR_USER)
    u = urlsplit(url)
    try:
        yield Served(process, u.hostname, u.port)
    finally:
        code = process.stop()
        print(f"--- extender log (tail) ---\n{process.tail(30)}")
        assert code == 0, f"the extender exited with {code} on SIGTERM"


def request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    reply = conn.getresponse()
    return reply.status, reply.getheader("Content-Type"), reply.read()


def filter_body() -> bytes:
    return json.dumps({"Pod": sched_pod(slice_(8, 2)), "NodeNames": ["nowhere"]}).encode()


@pytest.mark.parametrize("method, path, status, text", [
    ("GET", "/nothing", 404, b"/nothing: not found\n"),
    ("GET", "/filter", 405, b"GET /filter: method not allowed\n"),
    ("POST", "/healthz", 405, b"POST /healthz: method not allowed\n"),
    ("GET", "/healthz", 200, b"ok\n"),
    ("GET", "/readyz", 200, b"ok\n"),
])
def test_paths_and_methods(extender, method, path, status, text):
    _, host, port = extender
    conn = http.client.HTTPConnection(host, port, timeout=10)
    assert request(conn, method, path, b"" if method == "POST" else None) == (status, "text/plain", text)


def test_bad_bodies_are_answered_400_or_413_with_the_reason(extender):
    _, host, port = extender
    conn = http.client.HTTPConnection(host, port, timeout=10)
    status, kind, body = request(conn, "POST", "/filter", b"{not json")
    assert (status, kind) == (400, "application/json")
    assert json.loads(body)["Error"].startswith("bad request: ")
    status, _, body = request(conn, "POST", "/bind", b'{"PodName": 7}')
    assert status == 400 and "PodName" in json.loads(body)["Error"]
    huge = b'{"Pod": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        status, _, body = request(conn, "POST", "/filter", huge)
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server hung up instead of answering 413")
    assert status == 413 and "over 8388608 bytes" in json.loads(body)["Error"]
    # and the server goes on
    assert request(http.client.HTTPConnection(host, port, timeout=10), "GET", "/healthz")[0] == 200


def test_one_connection_carries_many_calls(extender):
    """kube-scheduler keeps its connections to the extender alive: every call on one socket."""
    _, host, port = extender
    conn = http.client.HTTPConnection(host, port, timeout=10)
    seen = set()
    for _ in range(5):
        status, _, body = request(conn, "POST", "/filter", filter_body())
        # a pod that does not exist: answered with an error, nothing reserved
        assert status == 200 and json.loads(body)["Error"].endswith(": not found")
        seen.add(conn.sock.getsockname())
    assert len(seen) == 1


def test_a_client_sending_one_byte_at_a_time_holds_no_one_up(extender):
    _, host, port = extender
    slow = socket.create_connection((host, port), timeout=10)
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    finished = threading.Event()

    def trickle():
        for byte in head:
            slow.sendall(bytes([byte]))
            time.sleep(0.05)
        finished.set()

    t = threading.Thread(target=trickle)
    t.start()
    try:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        for _ in range(3):
            assert request(conn, "POST", "/filter", filter_body())[0] == 200
        assert not finished.is_set(), "the slow client finished first: the test proved nothing"
    finally:
        t.join(30)
        slow.close()
