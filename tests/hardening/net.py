"""Sockets for the limit tests: raw TLS exchanges, slow clients, timed requests.

Every client here is bounded: it stops by itself after a fixed number of bytes or seconds,
and `close()` stops it at once. Everything connects to 127.0.0.1.
"""

from __future__ import annotations

import json
import selectors
import socket
import ssl
import threading
import time

import requests

from tests.builders import container as c
from tests.builders import pod, review

VALIDATE_BODY = json.dumps(review(pod(c("train", 1, 32, 8)))).encode()


def context(server) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=server.ca)


def connect_tls(server, timeout: float = 10, source: str | None = None) -> ssl.SSLSocket:
    """A TLS connection to the server, from the loopback address `source` if given."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=timeout,
                                   source_address=(source, 0) if source else None)
    return context(server).wrap_socket(raw, server_hostname="127.0.0.1")


def client_hello(server) -> bytes:
    """The bytes of a TLS ClientHello for the server, made with memory BIOs."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context(server).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def request_bytes(path: str = "/validate", body: bytes = VALIDATE_BODY, extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


def read_answer(sock, limit: float = 10) -> tuple[int | None, bytes]:
    """(status, raw) of one whole HTTP answer (head and Content-Length body), None for the
    status if the server closed or went quiet without one."""
    sock.settimeout(limit)
    data = b""
    try:
        while True:
            head, sep, rest = data.partition(b"\r\n\r\n")
            if sep:
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if len(rest) >= length:
                    break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionResetError, BrokenPipeError, ssl.SSLError):
        pass
    if not data.startswith(b"HTTP/"):
        return None, data
    return int(data.split(b" ", 2)[1]), data


def answer_json(raw: bytes):
    return json.loads(raw.partition(b"\r\n\r\n")[2] or b"null")


def timed_post(server, timeout: float, path: str = "/validate",
               body: bytes = VALIDATE_BODY) -> tuple[int | str, float]:
    """One POST on a new connection: (status or the error, seconds taken)."""
    session = requests.Session()
    session.trust_env = False
    session.verify = server.ca
    started = time.monotonic()
    try:
        resp = session.post(f"{server.url}{path}", data=body, timeout=timeout,
                            headers={"Content-Type": "application/json"})
        return resp.status_code, time.monotonic() - started
    except requests.RequestException as e:
        return type(e).__name__, time.monotonic() - started
    finally:
        session.close()


def timed_calls(server, calls: int, timeout: float,
                pause: float = 0.2) -> list[tuple[int | str, float]]:
    """`calls` timed POSTs, each on a new connection, `pause` seconds apart."""
    results = []
    for _ in range(calls):
        results.append(timed_post(server, timeout=timeout))
        time.sleep(pause)
    return results


class SlowClients:
    """`count` connections that each send `payload` one byte every `interval` seconds.

    mode: "idle" connects and sends nothing; "handshake" dribbles the TLS ClientHello;
    "headers" completes TLS and dribbles the request head; "body" sends the head at once and
    dribbles the body. Stops after `max_seconds` or on close().
    """

    def __init__(self, server, mode: str, count: int, interval: float = 1.0,
                 max_seconds: float = 60.0):
        self.server, self.mode, self.count = server, mode, count
        self.interval, self.max_seconds = interval, max_seconds
        self.socks: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "SlowClients":
        for _ in range(self.count):
            raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            if self.mode in ("headers", "body"):
                raw = context(self.server).wrap_socket(raw, server_hostname="127.0.0.1")
            self.socks.append(raw)
        if self.mode == "handshake":
            payload = client_hello(self.server)[:-1]  # never quite complete
        elif self.mode == "headers":
            payload = request_bytes()[:-len(VALIDATE_BODY) - 1]
        elif self.mode == "body":
            for s in self.socks:
                s.sendall(request_bytes()[:-len(VALIDATE_BODY)])
            payload = VALIDATE_BODY[:-1]
        else:
            payload = b""
        self._thread = threading.Thread(target=self._dribble, args=(payload,), daemon=True)
        self._thread.start()
        return self

    def _dribble(self, payload: bytes) -> None:
        deadline = time.monotonic() + self.max_seconds
        for i in range(len(payload)):
            if self._stop.wait(self.interval) or time.monotonic() > deadline:
                return
            for s in self.socks:
                try:
                    s.send(payload[i:i + 1])
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        for s in self.socks:
            try:
                s.close()
            except OSError:
                pass


class DribblingClients:
    """`count` connections that finish TLS, then send a request head one byte every `interval`
    seconds, and connect again at once when the server drops them (issue 17, item 7).

    One thread drives them all with non-blocking sockets, so a server that is slow to answer
    a handshake holds up none of the others. The connections come from `peers` loopback
    addresses (127.0.0.2 and up), `count / peers` from each, so that a real request from
    127.0.0.1 is another peer, as the API server is. Stops after `max_seconds` or on close().
    `reconnects` counts the drops.
    """

    def __init__(self, server, count: int, peers: int = 1, interval: float = 0.5,
                 max_seconds: float = 60.0):
        self.server, self.count, self.peers = server, count, peers
        self.interval, self.max_seconds = interval, max_seconds
        self.head = request_bytes()[:-len(VALIDATE_BODY) - 1]  # never quite complete
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "DribblingClients":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _connect(self, sel, i: int) -> None:
        raw = socket.socket()
        raw.setblocking(False)
        raw.bind((f"127.0.0.{2 + i % self.peers}", 0))
        try:
            raw.connect(("127.0.0.1", self.server.port))
        except BlockingIOError:
            pass
        tls = context(self.server).wrap_socket(raw, server_hostname="127.0.0.1",
                                               do_handshake_on_connect=False)
        sel.register(tls, selectors.EVENT_READ | selectors.EVENT_WRITE, [i, False, 0])

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        deadline = time.monotonic() + self.max_seconds
        try:
            for i in range(self.count):
                self._connect(sel, i)
            next_byte = time.monotonic() + self.interval
            while not self._stop.is_set() and time.monotonic() < deadline:
                for key, _ in sel.select(min(0.05, max(0.0, next_byte - time.monotonic()))):
                    self._step(sel, key)
                if time.monotonic() >= next_byte:
                    next_byte += self.interval
                    for key in list(sel.get_map().values()):
                        self._send_byte(sel, key)
        finally:
            for key in list(sel.get_map().values()):
                key.fileobj.close()
            sel.close()

    def _step(self, sel, key) -> None:
        state = key.data
        sock = key.fileobj
        try:
            if not state[1]:
                sock.do_handshake()
                state[1] = True
                sel.modify(sock, selectors.EVENT_READ, state)
            elif sock.recv(4096) == b"":  # an answer or a close: either way, start again
                raise ConnectionResetError
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError:
            self._drop(sel, sock, state[0])

    def _send_byte(self, sel, key) -> None:
        state = key.data
        if not state[1]:
            return
        if state[2] >= len(self.head):
            return
        try:
            key.fileobj.send(self.head[state[2]:state[2] + 1])
            state[2] += 1
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except OSError:
            self._drop(sel, key.fileobj, state[0])

    def _drop(self, sel, sock, i: int) -> None:
        sel.unregister(sock)
        sock.close()
        self.reconnects += 1
        self._connect(sel, i)

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)


def real_calls_under_dribbling(server, count: int, peers: int = 1, calls: int = 10,
                               settle: float = 4.0, timeout: float = 10.0) -> dict:
    """Real POSTs, each on a new connection (TLS handshake included), made while `count`
    dribbling clients keep their connections up; after `settle` seconds, so that the first
    round of them has been cut off and reconnected. Returns the seconds of each call."""
    slow = DribblingClients(server, count, peers, max_seconds=settle + calls * (timeout + 1)).start()
    try:
        time.sleep(settle)
        results = timed_calls(server, calls, timeout)
    finally:
        slow.close()
    return {"calls": results, "reconnects": slow.reconnects}
