"""The extender's HTTP server (webhook/extender/http_server.py) on 127.0.0.1 with a handler of
the test's own, over raw sockets: what kube-scheduler's Go client and a misbehaving client
can send. The extender app behind it is tested in test_server.py and test_handlers.py."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from webhook.extender.http_server import HttpServer, encode


class Running:
    """An HttpServer on its own event loop thread; `respond(method, path, body)` answers."""

    def __init__(self, **settings):
        self.loop = asyncio.new_event_loop()
        self.seen: list[tuple[str, str, bytes | None]] = []
        self.server = HttpServer(self.respond, **settings)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.server.start(self.sock))
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def respond(self, method, path, body):
        self.seen.append((method, path, body))
        if path == "/slow":
            return self._slow(body)
        if path == "/boom":
            raise RuntimeError("a bug")
        if body is None:
            return 413, [("content-type", "text/plain")], b"too large\n"
        return 200, [("content-type", "text/plain")], f"{method} {path} {len(body)}\n".encode()

    async def _slow(self, body):
        await asyncio.sleep(0.3)
        return 200, [("content-type", "text/plain")], b"slow done\n"

    def close(self, timeout: float = 10) -> None:
        asyncio.run_coroutine_threadsafe(self.server.close(), self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.sock.close()

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)


@pytest.fixture
def server():
    s = Running(keepalive=1.0, first_request=1.0, max_connections=4, max_body=1000, grace=2.0)
    yield s
    s.stop()


def read_answers(conn: socket.socket, count: int) -> list[tuple[int, dict, bytes]]:
    """`count` answers from the socket: (status, headers, body) each."""
    data, out = b"", []
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = data[:head_end].decode().split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            length = int(headers["content-length"])
            if len(data) >= head_end + 4 + length:
                out.append((int(lines[0].split()[1]), headers, data[head_end + 4:head_end + 4 + length]))
                data = data[head_end + 4 + length:]
                continue
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} answer(s)")
        data += chunk
    return out


def closed_by_server(conn: socket.socket, within: float = 5) -> bool:
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def post(path: str, body: bytes = b"{}", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            ).encode() + body


@pytest.mark.parametrize("status, headers, body, keep, head, expected", [
    (200, [("content-type", "application/json")], b"{}", True, False,
     b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"),
    (404, [], b"no\n", False, False,
     b"HTTP/1.1 404 Not Found\r\ncontent-length: 3\r\nconnection: close\r\n\r\nno\n"),
    (200, [], b"ok\n", True, True, b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n"),
    (599, [], b"", True, False, b"HTTP/1.1 599 \r\ncontent-length: 0\r\n\r\n"),
])
def test_an_answer_is_encoded_whole(status, headers, body, keep, head, expected):
    assert encode(status, headers, body, keep, head) == expected


def test_pipelined_requests_are_answered_in_order_even_when_the_first_waits(server):
    conn = server.connect()
    conn.sendall(post("/slow") + post("/fast", b"abc") + b"GET /page HTTP/1.1\r\nHost: x\r\n\r\n")
    answers = read_answers(conn, 3)
    assert [(s, b) for s, _, b in answers] == [
        (200, b"slow done\n"), (200, b"POST /fast 3\n"), (200, b"GET /page 0\n")]
    assert [p for _, p, _ in server.seen] == ["/slow", "/fast", "/page"]


def test_a_body_over_the_limit_is_read_and_dropped_and_the_connection_goes_on(server):
    conn = server.connect()
    conn.sendall(post("/filter", b"x" * 5000) + post("/filter", b"y" * 10))
    (s1, _, b1), (s2, _, b2) = read_answers(conn, 2)
    assert (s1, b1) == (413, b"too large\n") and (s2, b2) == (200, b"POST /filter 10\n")
    assert server.seen[0] == ("POST", "/filter", None)


def test_a_chunked_body_is_joined(server):
    conn = server.connect()
    conn.sendall(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert read_answers(conn, 1)[0][2] == b"POST /c 5\n"
    assert server.seen[-1] == ("POST", "/c", b"abcde")


@pytest.mark.parametrize("garbage, why", [
    (b"\x16\x03\x01\x02\x00hello TLS\r\n\r\n", b"Invalid method"),
    (b"GET / HTTP/9\r\n\r\n", b"Expected dot"),  # llhttp's words
    (b"NOT A REQUEST\r\n\r\n", b"Invalid method"),
    (b"GET %%% HTTP/1.1\r\n\r\n", b"url"),
    (b"GET http://[bad HTTP/1.1\r\nHost: x\r\n\r\n" + post("/after"), b"URL cannot be read"),
])
def test_what_is_not_http_is_answered_400_naming_why_and_closed(server, garbage, why):
    conn = server.connect()
    conn.sendall(garbage)
    (status, headers, body), = read_answers(conn, 1)
    assert status == 400 and headers.get("connection") == "close"
    assert body.startswith(b"not an HTTP request: ") and why in body, body
    assert closed_by_server(conn)
    assert server.seen == []


def test_a_handler_error_is_a_500_and_the_server_goes_on(server):
    conn = server.connect()
    conn.sendall(post("/boom") + post("/after"))
    (s1, _, _), (s2, _, b2) = read_answers(conn, 2)
    assert (s1, s2, b2) == (500, 200, b"POST /after 2\n")


def test_head_gets_the_length_and_no_body(server):
    conn = server.connect()
    conn.sendall(b"HEAD /page HTTP/1.1\r\nHost: x\r\n\r\n" + post("/next"))
    data = b""
    while b"POST /next" not in data:
        data += conn.recv(65536)
    assert data.startswith(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 13\r\n\r\n"
                           b"HTTP/1.1 200 OK")


def test_connection_close_is_honoured(server):
    conn = server.connect()
    conn.sendall(post("/once", extra="Connection: close\r\n"))
    (_, headers, _), = read_answers(conn, 1)
    assert headers.get("connection") == "close" and closed_by_server(conn)


def test_an_idle_connection_is_closed_after_the_keepalive(server):
    conn = server.connect()
    conn.sendall(post("/a"))
    read_answers(conn, 1)
    started = time.monotonic()
    assert closed_by_server(conn, within=5)
    assert 0.8 < time.monotonic() - started < 4


def test_a_request_left_half_sent_is_closed_after_the_deadline(server):
    conn = server.connect()
    conn.sendall(b"POST /half HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    assert closed_by_server(conn, within=5)
    assert server.seen == []


def test_a_connection_without_a_first_request_is_closed_long_before_the_keepalive():
    """An idle connection that never sent a request lives `first_request` seconds, not the
    keep-alive that kube-scheduler's answered connections get."""
    s = Running(keepalive=60.0, first_request=0.5)
    try:
        silent = s.connect()
        started = time.monotonic()
        assert closed_by_server(silent, within=10)
        assert 0.4 < time.monotonic() - started < 10
        answered = s.connect()  # one that sends at once is kept alive past that deadline
        answered.sendall(post("/a"))
        read_answers(answered, 1)
        assert not closed_by_server(answered, within=1.5)
    finally:
        s.stop()


def test_a_connection_the_client_closes_leaves_no_timer_behind(server):
    """Its idle timer is cancelled with it: a timer left to fire would hold every connection
    kube-scheduler opens and drops (a third of its calls) for the keepalive."""
    c = server.connect()
    c.sendall(post("/a"))
    read_answers(c, 1)
    (conn,) = server.server.connections
    assert conn.timer is not None  # armed for the keepalive
    c.close()
    deadline = time.monotonic() + 5
    while server.server.connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.server.connections and conn.timer is None


def test_one_address_cannot_take_every_connection():
    s = Running(max_connections=10, max_per_peer=3)
    try:
        kept = [s.connect() for _ in range(3)]
        for c in kept:
            c.sendall(post("/hello"))
            read_answers(c, 1)
        extra = s.connect()
        (status, _, body), = read_answers(extra, 1)
        assert status == 503 and body == b"too many connections from this address\n"
        other = socket.socket()  # another loopback address is still served
        other.settimeout(5)
        other.bind(("127.0.0.2", 0))
        other.connect(("127.0.0.1", s.port))
        other.sendall(post("/hello"))
        assert read_answers(other, 1)[0][0] == 200
        kept.pop().close()  # and the first address gets its place back
        time.sleep(0.2)
        again = s.connect()
        again.sendall(post("/hello"))
        assert read_answers(again, 1)[0][0] == 200
    finally:
        s.stop()


def test_connections_over_the_limit_are_answered_503(server):
    kept = [server.connect() for _ in range(4)]
    for c in kept:  # each one answered: all four are open on the server's side
        c.sendall(post("/hello"))
        read_answers(c, 1)
    extra = server.connect()
    (status, _, body), = read_answers(extra, 1)
    assert status == 503 and body == b"too many connections\n"
    kept.pop().close()
    time.sleep(0.2)
    again = server.connect()
    again.sendall(post("/hello"))
    assert read_answers(again, 1)[0][0] == 200


def test_close_lets_the_answer_under_way_finish_and_refuses_new_connections(server):
    busy, idle = server.connect(), server.connect()
    idle.sendall(post("/a"))
    read_answers(idle, 1)
    busy.sendall(post("/slow"))
    time.sleep(0.05)
    closing = threading.Thread(target=server.close)
    closing.start()
    (status, headers, body), = read_answers(busy, 1)
    closing.join(10)
    assert (status, body, headers.get("connection")) == (200, b"slow done\n", "close")
    assert closed_by_server(idle) and closed_by_server(busy)
    with pytest.raises(ConnectionRefusedError):
        server.connect()


def test_a_client_gone_before_its_answer_costs_nothing_else(server):
    conn = server.connect()
    conn.sendall(post("/slow"))
    conn.close()
    time.sleep(0.5)
    other = server.connect()
    other.sendall(post("/b"))
    assert read_answers(other, 1)[0][0] == 200
