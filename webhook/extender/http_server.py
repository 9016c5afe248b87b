"""The extender's HTTP/1.1 server: asyncio streams of kube-scheduler's calls, parsed by
httptools, each answer written in one piece.

Why not uvicorn (which served the extender before): in a bench backlog a third of the
extender's CPU went to uvicorn's writes, the head and the body of each answer in two system
calls, each a loopback TCP send with its wake-up of kube-scheduler; the ASGI messages around
them cost another share. kube-scheduler waits for each /filter answer before it takes the
next pod, so that CPU was the pace of the path (docs/benchmarks.md, "Extender path").

What it does: keeps connections alive (kube-scheduler 1.20 keeps two of them idle and closes
any more it opened while binds overlap a filter: docs/benchmarks.md, "Extender path"),
answers the requests of one connection in order, one at a time (reading pauses meanwhile),
closes a connection that sends no whole request within `first_request` seconds of its
accept or `keepalive` seconds of its last answer, answers 400 to what is not HTTP and 503
above `max_connections` in all or `max_per_peer` from one address (so that idle connections
of one peer cannot lock the others out, should anything but loopback reach it), reads at most
`max_body` bytes of a body (the rest is read and dropped; the handler is told with
`body=None`), and on `close()` stops listening, lets the answers under way finish for up to
`grace` seconds and closes the rest.

The handler: `respond(method, path, body) -> (status, headers, body)` or an awaitable of it;
an answer that needs no waiting is written at once, without a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from http import HTTPStatus
from typing import Awaitable, Callable, Sequence, Union

import httptools

log = logging.getLogger("webhook.extender")

Headers = Sequence[tuple[str, str]]
Answer = tuple[int, Headers, bytes]
Respond = Callable[[str, str, Union[bytes, None]], Union[Answer, Awaitable[Answer]]]

KEEPALIVE = 120  # seconds; above Go's 90 s IdleConnTimeout
FIRST_REQUEST = 10  # seconds from the accept to a whole first request (kube-scheduler sends at once)
MAX_CONNECTIONS = 1000  # open at once; more are answered 503 (each costs a descriptor)
# open at once from one address: kube-scheduler holds one for each bind under way (and keeps 2
# idle); in a bench backlog the binds waiting on a busy API server held all of 64, and the
# next filter was refused (the pod backed off). Half of all, as the webhook's server.
MAX_PER_PEER = 500
MAX_BODY = 8 * 1024 * 1024
GRACE = 10  # seconds the answers under way get on close()
WRITE_BUFFER = 1024 * 1024  # unread answers a connection may pile up before it is read no more


_REASONS = {s.value: s.phrase for s in HTTPStatus}
# (status, headers) -> the head up to its content-length's value, for headers given as a tuple
# (the app's constants): a head is the same for every filter answer
_HEADS: dict[tuple[int, Headers], bytes] = {}


def encode(status: int, headers: Headers, body: bytes, keep_alive: bool,
           head_only: bool = False) -> bytes:
    """The whole answer, status line to body, as one write."""
    key = (status, headers) if isinstance(headers, tuple) else None
    head = _HEADS.get(key) if key is not None else None
    if head is None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}"] + [f"{k}: {v}" for k, v in headers]
        head = ("\r\n".join(lines) + "\r\ncontent-length: ").encode("latin-1")
        if key is not None and len(_HEADS) < 64:
            _HEADS[key] = head
    end = b"\r\n\r\n" if keep_alive else b"\r\nconnection: close\r\n\r\n"
    return b"%s%d%s%s" % (head, len(body), end, b"" if head_only else body)


class _Connection(asyncio.Protocol):
    def __init__(self, server: "HttpServer"):
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer = ""  # the client's address
        self.waiting: deque = deque()  # whole requests not yet answered (a client may pipeline)
        self.busy = False  # an answer is being made
        self.write_paused = False
        self.read_paused = False  # while an answer is awaited: what comes next waits in the socket
        self.closing = False
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None  # when an idle connection is closed; None: busy
        self._url: list[bytes] = []
        self._body: list[bytes] | None = []
        self._size = 0

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else str(peer)
        refusal = self.server.admit(self)
        if refusal is not None:
            transport.write(encode(503, [("content-type", "text/plain")], refusal, False))
            transport.close()
            self.closing = True
            return
        self._arm(self.server.first_request)

    def connection_lost(self, exc) -> None:
        self.closing = True
        self.server.forget(self)
        self._disarm()
        self._cancel_timer()  # else the loop holds the connection until the timer is due

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, b"protocol upgrades are not served\n")
        except httptools.HttpParserError as e:
            self._refuse(400, f"not an HTTP request: {e}\n".encode())

    def pause_writing(self) -> None:
        self.write_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.busy and not self.closing:
            self.read_paused = False
            self.transport.resume_reading()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._body, self._size = [], [], 0

    def on_url(self, url: bytes) -> None:
        self._url.append(url)

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._body is not None:
            if self._size > self.server.max_body:
                self._body = None  # read on, keep nothing
            else:
                self._body.append(body)

    def on_message_complete(self) -> None:
        if self.closing:  # refused already: what follows on this connection is not answered
            return
        try:
            path = httptools.parse_url(b"".join(self._url)).path.decode("latin-1")
        except httptools.HttpParserInvalidURLError:
            self._refuse(400, b"not an HTTP request: its URL cannot be read\n")
            return
        body = None if self._body is None else b"".join(self._body)
        self.waiting.append((self.parser.get_method().decode("latin-1"), path, body,
                             self.parser.should_keep_alive()))
        if not self.busy:
            self._next()

    # answering
    def _next(self) -> None:
        self._disarm()
        self.busy = True
        method, path, body, keep_alive = self.waiting.popleft()
        try:
            result = self.server.respond(method, path, body)
        except Exception:
            log.exception("%s %s", method, path)
            result = _internal_error()
        if type(result) is not tuple:  # an awaitable: `inspect.isawaitable` cost more
            # Reading stops only for an answer that waits (a filter is answered before this
            # returns, with no pause and resume: two system calls a call saved).
            self.transport.pause_reading()
            self.read_paused = True
            task = asyncio.ensure_future(self._finish_later(result, method, path, keep_alive))
            self.server.tasks.add(task)  # held until done: the loop keeps weak references only
            task.add_done_callback(self.server.tasks.discard)
        else:
            self._finish(result, method, keep_alive)

    async def _finish_later(self, pending: Awaitable[Answer], method: str, path: str,
                            keep_alive: bool) -> None:
        try:
            result = await pending
        except Exception:
            log.exception("%s %s", method, path)
            result = _internal_error()
        self._finish(result, method, keep_alive)

    def _finish(self, result: Answer, method: str, keep_alive: bool) -> None:
        if self.transport.is_closing():  # the client went away meanwhile
            self.busy = False
            return
        keep_alive = keep_alive and not self.server.closing
        status, headers, body = result
        self.transport.write(encode(status, headers, body, keep_alive, method == "HEAD"))
        self.busy = False
        if not keep_alive:
            self.close()
        elif self.transport.get_write_buffer_size() > WRITE_BUFFER:
            self.close()  # a client that sends and never reads
        elif self.waiting:
            self._next()
        else:
            self._arm()
            if self.read_paused and not self.write_paused:
                self.read_paused = False
                self.transport.resume_reading()

    def _refuse(self, status: int, text: bytes) -> None:
        self.transport.write(encode(status, [("content-type", "text/plain")], text, False))
        self.close()

    def close(self) -> None:
        self.closing = True
        self._disarm()
        self._cancel_timer()
        self.transport.close()

    def close_if_idle(self) -> None:
        if not self.busy:
            self.close()

    # Idle timeout: from the last answer (or the accept) to the next whole request. An answer
    # moves the deadline; the timer is made again only when it fires early or would fire late
    # (a timer made and cancelled for every request was a tenth of the server's own CPU).
    def _arm(self, seconds: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + (self.server.keepalive if seconds is None else seconds)
        if self.timer is None or self.timer.when() > self.deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(self.deadline, self._expire)

    def _disarm(self) -> None:
        self.deadline = None

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if self.closing or self.deadline is None:  # closed, or answering: armed again after
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self.deadline:  # an answer since moved it
            self.timer = loop.call_at(self.deadline, self._expire)
        else:
            self.close()


def _internal_error() -> Answer:
    return 500, [("content-type", "text/plain")], b"internal error\n"


class HttpServer:
    def __init__(self, respond: Respond, keepalive: float = KEEPALIVE,
                 max_connections: int = MAX_CONNECTIONS, max_body: int = MAX_BODY,
                 grace: float = GRACE, max_per_peer: int = MAX_PER_PEER,
                 first_request: float = FIRST_REQUEST):
        self.respond, self.keepalive, self.grace = respond, keepalive, grace
        self.max_connections, self.max_body = max_connections, max_body
        self.max_per_peer, self.first_request = max_per_peer, first_request
        self.connections: set[_Connection] = set()
        self.per_peer: Counter[str] = Counter()  # open connections by peer address
        self.tasks: set[asyncio.Future] = set()
        self.closing = False
        self._server: asyncio.AbstractServer | None = None

    def admit(self, conn: _Connection) -> bytes | None:
        """Count a new connection in, or say why it is refused."""
        if len(self.connections) >= self.max_connections:
            return b"too many connections\n"
        if self.per_peer[conn.peer] >= self.max_per_peer:
            return b"too many connections from this address\n"
        self.connections.add(conn)
        self.per_peer[conn.peer] += 1
        return None

    def forget(self, conn: _Connection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
            self.per_peer[conn.peer] -= 1
            if not self.per_peer[conn.peer]:
                del self.per_peer[conn.peer]

    async def start(self, sock) -> None:
        """Serve on a bound socket."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(self), sock=sock)

    async def close(self) -> None:
        """Stop listening; the answers under way get `grace` seconds, then every connection
        is closed."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_if_idle()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace
        while any(c.busy for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
