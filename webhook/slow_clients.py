"""Bound how long a slow client can hold one of gunicorn's threads (docs/reliability.md, 2).

gunicorn's gthread worker gives each connection with bytes waiting a thread, which then
reads the TLS handshake, the request head and the body with blocking reads and no timeout:
a client sending a byte a second holds that thread as long as it likes. With all threads
held, the API server's calls wait past its 5 s timeout, and the webhook fails closed.

Two pieces, wired in webhook/serve.py:
- BudgetedSSLSocket: every read of a handshake and of a request is given what is left of
  READ_BUDGET, counted from its first read; past it the read fails and gunicorn closes the
  connection. Each request (each `handle`) starts a new budget, so the time a kept-alive
  connection sits idle in gunicorn's poller is not charged.
- BoundedThreadWorker: a new connection with no bytes yet goes back to the poller after
  FIRST_BYTES_WAIT instead of gthread's 5 s, so silent connections do not queue up threads.
"""

from __future__ import annotations

import ssl
import time

from gunicorn.http.errors import NoMoreData
from gunicorn.workers import gthread

READ_BUDGET = 3.0  # seconds to receive a handshake or a request: well inside the API server's 5
FIRST_BYTES_WAIT = 0.05  # seconds; a client's ClientHello follows its connect at once


class ReadBudgetSpent(NoMoreData):
    """A NoMoreData, so gunicorn closes the connection with a debug line, not a traceback."""

    def __str__(self) -> str:
        return f"not received within the read budget of {READ_BUDGET:g} s"


class BudgetedSSLSocket(ssl.SSLSocket):
    """An SSLSocket whose reads share one deadline; set as the context's sslsocket_class."""

    _deadline: float | None = None  # armed by the first read, cleared by new_budget()

    def new_budget(self) -> None:
        self._deadline = None

    def _bounded(self, read, *args):
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + READ_BUDGET
        left = self._deadline - now
        if left <= 0:
            raise ReadBudgetSpent()
        current = self.gettimeout()
        if current is None or current > left:  # a shorter timeout of the caller's stays
            self.settimeout(left)
        try:
            return read(*args)
        except TimeoutError:
            if time.monotonic() >= self._deadline:
                raise ReadBudgetSpent() from None
            raise  # the caller's own, shorter timeout (a body drain, a graceful close)

    def do_handshake(self, *args):
        return self._bounded(super().do_handshake, *args)

    def recv(self, *args):
        return self._bounded(super().recv, *args)

    def recv_into(self, *args):
        return self._bounded(super().recv_into, *args)


def budgeted(context: ssl.SSLContext) -> ssl.SSLContext:
    """The serving context, its sockets budgeted (idempotent: called per connection)."""
    context.sslsocket_class = BudgetedSSLSocket
    return context


class BoundedThreadWorker(gthread.ThreadWorker):
    """gthread, with a short wait for a new connection's first bytes and a budget a request."""

    def handle(self, conn):
        if not conn.initialized and not conn.data_ready:
            if not conn.wait_for_data(FIRST_BYTES_WAIT):
                return gthread._DEFER  # the poller hands it back when bytes come
        if isinstance(conn.sock, BudgetedSSLSocket):
            conn.sock.new_budget()  # a kept-alive connection's next request
        return super().handle(conn)
