"""Slow clients cost a file descriptor, not a thread (docs/reliability.md, "A slow or flooding
client never delays another's reviews").

gunicorn's gthread worker hands each new connection to a thread, which then reads the TLS
handshake and the request with blocking reads: a client sending its request head a byte at a
time holds that thread, and 32 of them hold all 4 for as long as they like. The API server's
calls then wait past its timeout: the `Fail` entries refuse every pod, the `Ignore` ones admit
unchecked.

PrefetchingThreadWorker keeps gthread's threads for what they are good at (running the app)
and moves everything a client can make slow to the worker's event loop, non-blocking:
- the TLS handshake and the whole request (head and body, by Content-Length or chunked) are
  read in the poller; a thread gets the connection only once its request is all there, so it
  never waits on a client;
- a handshake and request must arrive within READ_BUDGET of the connection's accept (of its
  first byte, for a kept-alive connection's next request): past it the client gets a 408
  (if it had sent part of a request) and is closed;
- a body over MAX_BODY is answered 413 from the loop at once, chunked or not;
- one address may hold a quarter of `worker_connections` (more are closed on accept); when
  every slot is taken, an idle or silent connection of the peer holding the most gives way to
  the newcomer (webhook/server/slots.py), so gthread goes on accepting; only when no connection
  may give way (every one has a request read in full) does the kernel's backlog hold the rest.

One peer cannot delay another's reviews (issue 32, item 6: 16 connections sending 2.5 MB
reviews back to back made another client's calls take 2-5 s, with 32 up to 16 s):
- requests read in full wait for a thread in a FairQueue, not in the thread pool's
  first-come queue: a free thread takes the request of the waiting peer (address) with the
  fewest requests running. While another peer is about (connected, or connected within
  PRESENT_FOR), the last free thread is kept for a peer running nothing, so a newcomer's
  request need not wait for a busy peer's review to end; a lone peer gets every thread;
- the loop reads at most READ_PER_PEER_PER_TURN bytes of one peer per turn, so one peer's big
  bodies do not hold it (and another peer's handshake) for long;
- the worker's threads switch the GIL every SWITCH_INTERVAL, not every 5 ms: with the threads
  busy on big reviews, each step of the loop (a handshake, a read) waited for the GIL that
  long, once per busy thread.

BudgetedSSLSocket bounds the rare reads a thread still makes (a pipelined request after the
one prefetched, a head too long to prefetch): they share the request's deadline.
"""

from __future__ import annotations

import errno
import json
import selectors
import ssl
import sys
import time
from collections import OrderedDict, deque
from functools import partial

from gunicorn import sock as gunicorn_sock
from gunicorn.http import get_parser
from gunicorn.http.errors import NoMoreData
from gunicorn.workers import gthread

from ..admission.review import MAX_BODY
from . import slots

READ_BUDGET = 3.0  # seconds to receive a handshake and a request: well inside the API server's 5
MAX_CONNECTIONS = 1000  # in all (gunicorn's worker_connections); each costs a descriptor
MAX_PER_PEER = slots.max_per_peer(MAX_CONNECTIONS)  # from one address, with the default above
MAX_HEAD = 64 * 1024  # a head longer than this is handed on for gunicorn to refuse
# After a 413 sent from the loop, what is read and dropped before closing (within the budget):
# closing with the client's bytes unread would reset the connection, and the answer with it.
DRAIN_AFTER_ANSWER = 1024 * 1024
_RECV = 64 * 1024  # a TLS record holds at most 16 KiB: one recv never returns more
# Bytes the loop reads of one peer's connections in one turn (four TLS records): a 2 MB body
# takes many turns, and every other peer's handshakes and requests are read between them.
READ_PER_PEER_PER_TURN = 64 * 1024
# A peer counts as about for this long after its last accepted connection (as long as a kept-
# alive connection may idle): while another is about, a peer does not take the last free thread.
PRESENT_FOR = 120.0
SWITCH_INTERVAL = 0.001  # seconds; CPython's default is 0.005
_MORE = object()  # _read's answer while a request is not complete


class ReadBudgetSpent(NoMoreData):
    """A NoMoreData, so gunicorn closes the connection with a debug line, not a traceback."""

    def __str__(self) -> str:
        return f"not received within the read budget of {READ_BUDGET:g} s"


class BudgetedSSLSocket(ssl.SSLSocket):
    """An SSLSocket whose blocking reads end at `deadline`; set as the context's sslsocket_class."""

    deadline: float | None = None

    def _bounded(self, read, *args):
        if self.deadline is None or self.gettimeout() == 0.0:  # the loop's non-blocking reads
            return read(*args)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ReadBudgetSpent()
        self.settimeout(left)
        try:
            return read(*args)
        except TimeoutError:
            raise ReadBudgetSpent() from None

    def recv(self, *args):
        return self._bounded(super().recv, *args)

    def recv_into(self, *args):
        return self._bounded(super().recv_into, *args)


def budgeted(context: ssl.SSLContext) -> ssl.SSLContext:
    """The serving context, its sockets budgeted (idempotent: called per connection)."""
    context.sslsocket_class = BudgetedSSLSocket
    return context


class TooLarge(Exception):
    pass


class RequestFramer:
    """Where the first request in a buffer ends, read as bytes come (no copy of the body)."""

    __slots__ = ("buf", "end", "_chunk_at", "_chunked_total", "_head_end", "_chunked")

    def __init__(self) -> None:
        self.buf: bytes | bytearray = b""
        self.end: int | None = None  # set once the request is complete
        self._head_end = -1
        self._chunked = False
        self._chunk_at = 0
        self._chunked_total = 0

    def feed(self, data: bytes) -> bool:
        """Add bytes; True once a whole request (or something gunicorn must refuse) is in.
        Raises TooLarge for a body over MAX_BODY."""
        if self.buf:
            if type(self.buf) is bytes:  # a second piece: from now on, grown in place
                self.buf = bytearray(self.buf)
            self.buf += data
        else:
            self.buf = data  # most requests come in one piece: no copy
        if self._head_end < 0 and not self._head():
            return self.end is not None
        if self._chunked:
            return self._chunks()
        return self.end is not None and len(self.buf) >= self.end

    def _head(self) -> bool:
        at = self.buf.find(b"\r\n\r\n")
        if at < 0:
            if len(self.buf) > MAX_HEAD:
                self.end = len(self.buf)  # gunicorn answers it
            return False
        self._head_end = body = at + 4
        head = self.buf[:at + 2].lower()  # each header line ends with \r\n
        length = 0
        if b"\r\ntransfer-encoding:" in head or b"\r\nexpect:" in head:
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip() == b"transfer-encoding" and b"chunked" in value:
                    self._chunked = True
                elif name.strip() == b"expect":  # the client waits for gunicorn's 100 first
                    self.end = body
                    return False
        cl = head.find(b"\r\ncontent-length:")
        if cl >= 0 and not self._chunked:
            try:
                length = int(head[cl + 17:head.index(b"\r\n", cl + 17)])
            except ValueError:
                self.end = body  # gunicorn answers 400
                return False
            if length > MAX_BODY:
                raise TooLarge(f"a body of {length} bytes")
        self._chunk_at = body
        self.end = body + length
        return True

    def _chunks(self) -> bool:
        buf = self.buf
        while True:
            line_end = buf.find(b"\r\n", self._chunk_at)
            if line_end < 0:
                return False
            try:
                size = int(buf[self._chunk_at:line_end].split(b";")[0], 16)
            except ValueError:
                self.end = len(buf)  # gunicorn answers 400
                return True
            if size == 0:  # the last chunk, then trailer lines up to an empty one
                at = line_end + 2
                while True:
                    eol = buf.find(b"\r\n", at)
                    if eol < 0:
                        return False
                    if eol == at:
                        self.end = eol + 2
                        return True
                    at = eol + 2
            if self._chunked_total + size > MAX_BODY:
                raise TooLarge(f"a chunked body of more than {MAX_BODY} bytes")
            next_at = line_end + 2 + size + 2
            if next_at > len(buf):
                return False  # read this chunk's header again once more has come: count it then
            self._chunked_total += size
            self._chunk_at = next_at


class FairQueue:
    """Requests read in full, waiting for a thread, per peer. The next one is the first
    request of the waiting peer with the fewest requests running (a thread each); among
    equals, the peer that has waited longest. The last free thread goes only to a peer running
    nothing, unless no other peer is about. Pure bookkeeping: no sockets, no threads."""

    def __init__(self) -> None:
        self.waiting: OrderedDict[object, deque] = OrderedDict()  # longest-waiting peer first
        self.running: dict[object, int] = {}
        self.running_total = 0

    def __len__(self) -> int:
        return sum(len(q) for q in self.waiting.values())

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def push(self, peer, item) -> None:
        queue = self.waiting.get(peer)
        if queue is None:
            queue = self.waiting[peer] = deque()
        queue.append(item)

    def pop(self, free: int, others_about=lambda peer: False):
        """The next item to run on one of `free` threads, counted as running for its peer;
        None if none waits or the last free thread is kept. `others_about(peer)`: whether a
        peer other than `peer` is connected or was lately."""
        if not self.waiting or free <= 0:
            return None
        # min() keeps the first of equals: the longest-waiting peer. A scan, not a heap: the
        # peers waiting at once are few (each has a full request read).
        peer = min(self.waiting, key=lambda p: self.running.get(p, 0))
        if free == 1 and self.running.get(peer, 0) and others_about(peer):
            return None  # every waiting peer runs something: keep the thread for a newcomer
        queue = self.waiting[peer]
        item = queue.popleft()
        if queue:
            self.waiting.move_to_end(peer)  # round-robin among peers running as many
        else:
            del self.waiting[peer]
        self.running[peer] = self.running.get(peer, 0) + 1
        self.running_total += 1
        return item

    def done(self, peer) -> None:
        """An item of `peer` has finished running."""
        left = self.running.get(peer, 0) - 1
        if left > 0:
            self.running[peer] = left
        else:
            self.running.pop(peer, None)
        self.running_total -= 1


class PeerConn(gthread.TConn):
    """A connection counted against its peer's bound until it is closed."""

    def __init__(self, cfg, sock, client, server, peers: dict, peer):
        super().__init__(cfg, sock, client, server)
        self.peers, self.peer = peers, peer
        self.handshaken = not isinstance(sock, ssl.SSLSocket)
        self.framer: RequestFramer | None = None
        self.deadline = 0.0
        self.draining = 0  # bytes still to drop after an answer sent from the loop
        self.counted = True

    def close(self, graceful=False):
        if self.counted:
            self.counted = False
            left = self.peers.get(self.peer, 1) - 1
            if left > 0:
                self.peers[self.peer] = left
            else:
                self.peers.pop(self.peer, None)
        super().close(graceful)


def _answer(status: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class PrefetchingThreadWorker(gthread.ThreadWorker):
    """gthread whose event loop does the handshake and reads the request (see the top)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.peers: dict[str, int] = {}
        self.prefetching: dict[PeerConn, None] = {}  # in deadline order (insertion order)
        self.fair = FairQueue()  # requests read in full, waiting for a thread
        self.read_this_turn: dict[str, int] = {}  # bytes per peer in this loop turn
        self.accepted_at: dict[str, float] = {}  # per peer, its last accept; oldest first
        self.max_per_peer = slots.max_per_peer(self.worker_connections)

    def init_process(self):
        sys.setswitchinterval(SWITCH_INTERVAL)  # in the worker: see the top
        super().init_process()

    def wait_for_and_dispatch_events(self, timeout):
        self.read_this_turn.clear()
        super().wait_for_and_dispatch_events(timeout)

    def enqueue_req(self, conn):
        """A request read in full: it waits for a thread in the fair queue, not in the pool's
        first-come queue, where one peer's many requests would go before another's one."""
        self.fair.push(conn.peer, conn)
        self._dispatch()

    def _dispatch(self) -> None:
        while True:
            conn = self.fair.pop(self.cfg.threads - self.fair.running_total, self._others_about)
            if conn is None:
                return
            super().enqueue_req(conn)

    def _others_about(self, peer) -> bool:
        """Whether a peer other than `peer` has a connection open or had one accepted within
        PRESENT_FOR: the API server's calls may come on new connections."""
        return (len(self.peers) > (peer in self.peers)
                or len(self.accepted_at) > (peer in self.accepted_at))

    def _forget_departed_peers(self) -> None:
        horizon = time.monotonic() - PRESENT_FOR
        while self.accepted_at:
            peer, at = next(iter(self.accepted_at.items()))
            if at > horizon:
                return
            del self.accepted_at[peer]

    def finish_request(self, conn, fs):
        self.fair.done(conn.peer)
        super().finish_request(conn, fs)  # may queue the connection's next request again
        self._dispatch()
        self._make_room()  # the slots were all taken by requests: this one may now give way

    def accept(self, listener):
        try:
            client, addr = listener.accept()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        peer = addr[0] if isinstance(addr, tuple) else addr
        held = self.peers.get(peer, 0)
        if held >= self.max_per_peer:
            client.close()
            return
        if self.cfg.is_ssl:
            client.setblocking(False)
            try:
                client = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
            except (OSError, ValueError):
                client.close()
                return
        self.peers[peer] = held + 1
        self.accepted_at.pop(peer, None)  # re-inserted last: the dict stays oldest first
        self.accepted_at[peer] = time.monotonic()
        self.nr_conns += 1
        conn = PeerConn(self.cfg, client, addr, listener.getsockname(), self.peers, peer)
        self._make_room()  # before the newcomer is a candidate: it is the one to let in
        self._prefetch(conn)

    def _make_room(self) -> None:
        """With every slot taken, close connections that may give way (slots.to_close) until one
        is free: gthread then goes on accepting, and a newcomer never waits in the backlog for
        a slow client's read budget to end."""
        while self.nr_conns >= self.worker_connections:
            conn = slots.to_close(self.peers, (
                ((c.peer, c) for c in self.keepalived_conns),  # idle, oldest first
                ((c.peer, c) for c in self.prefetching if not (c.framer.buf or c.draining)),
                ((c.peer, c) for c in self.prefetching if c.framer.buf or c.draining)))
            if conn is None:
                return
            if conn in self.prefetching:
                started = conn.framer.buf and not conn.draining
                self._drop(conn, _answer("503 Service Unavailable", "closed to make room for "
                                         "other peers: every connection slot is taken")
                           if started else b"")
            else:
                self.keepalived_conns.remove(conn)
                self.poller.unregister(conn.sock)
                self.nr_conns -= 1
                conn.close()

    def on_client_socket_readable(self, conn, client):
        """A kept-alive connection's next request: read it here too, not in a thread."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._prefetch(conn)

    def _prefetch(self, conn: PeerConn) -> None:
        conn.framer = RequestFramer()
        conn.deadline = time.monotonic() + READ_BUDGET
        # Try at once: a kept-alive connection's request is there already (no poller round).
        if self._read(conn) is _MORE:
            self.prefetching[conn] = None
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))

    def _readable(self, conn: PeerConn, _sock) -> None:
        self._read(conn)

    def _release(self, conn: PeerConn) -> None:
        """The loop lets go of a connection (handed to a thread or closed): off the poller."""
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError):  # never registered: done on the first read
            pass
        self.prefetching.pop(conn, None)

    def _read(self, conn: PeerConn):
        """Advance the handshake and the request: _MORE while bytes are missing, else the
        connection has been handed to a thread or dropped."""
        sock = conn.sock
        try:
            if not conn.handshaken:
                sock.do_handshake()
                conn.handshaken = True
            while self._may_read(conn):
                data = sock.recv(_RECV)
                if not data:
                    return self._drop(conn)
                self.read_this_turn[conn.peer] = self.read_this_turn.get(conn.peer, 0) + len(data)
                if conn.draining:
                    conn.draining -= len(data)
                    if conn.draining <= 0:
                        return self._drop(conn)
                elif conn.framer.feed(data):
                    return self._hand_over(conn)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return _MORE
        except TooLarge as e:
            self._send(conn, _answer("413 Request Entity Too Large",
                                     f"{e} is over the limit of {MAX_BODY} bytes"))
            conn.draining = DRAIN_AFTER_ANSWER
            return _MORE
        except (OSError, ValueError):  # a bad handshake, a reset
            return self._drop(conn)
        return _MORE  # its peer has had its share of this turn: the next turn reads on

    def _may_read(self, conn: PeerConn) -> bool:
        """Whether to read on now: yes while the peer is under its bytes of this turn. Past
        them the socket stays readable, so the next turn (at once: select finds it ready)
        reads on, after every other peer's ready sockets have been read."""
        if self.read_this_turn.get(conn.peer, 0) < READ_PER_PEER_PER_TURN:
            return True
        # Bytes already decrypted wake no select: read them now (none, as we read whole
        # records; kept for safety).
        return isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending() > 0

    def _hand_over(self, conn: PeerConn) -> None:
        self._release(conn)
        data = conn.framer.buf
        conn.framer = None
        if conn.parser is None:
            conn.parser = get_parser(self.cfg, conn.sock, conn.client)
            conn.initialized = True
        conn.parser.unreader.unread(data)
        conn.data_ready = True
        if isinstance(conn.sock, BudgetedSSLSocket):
            conn.sock.deadline = conn.deadline
        self.enqueue_req(conn)

    def _drop(self, conn: PeerConn, answer: bytes = b"") -> None:
        """Close a connection the loop holds (registered with the poller or not)."""
        self._release(conn)
        self._send(conn, answer)
        self.nr_conns -= 1
        conn.close()

    @staticmethod
    def _send(conn: PeerConn, answer: bytes) -> None:
        """Best effort, non-blocking: a few hundred bytes fit in any socket buffer."""
        if answer:
            try:
                conn.sock.send(answer)
            except (OSError, ValueError):
                pass

    def murder_pending(self):
        super().murder_pending()
        self._forget_departed_peers()
        now = time.monotonic()
        while self.prefetching:
            conn = next(iter(self.prefetching))
            if conn.deadline > now:
                break
            started = not conn.draining and conn.framer is not None and conn.framer.buf
            self._drop(conn, _answer("408 Request Timeout", f"request not received in full "
                                                            f"within the read budget of "
                                                            f"{READ_BUDGET:g} s")
                       if started else b"")
