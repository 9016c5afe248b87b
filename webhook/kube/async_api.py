"""JSON requests to the API server on an asyncio event loop: the extender's binds and reads.

The extender answers kube-scheduler on one event loop (extender/app.py); a bind made
there through the threaded `Api` costs a thread hand-off each way and urllib3's layers:
0.40 ms of CPU per pods/binding, against 0.09 ms as one write of the whole request and a
parse of the answer by httptools (measured side by side on the test API server). On a
scheduler that decides one pod at a time, that CPU is the pace.

Same server, TLS material and Authorization header as the `Api` it is made from (the
kubernetes client's configuration), same `Reply` and `ApiError`. Connections are kept alive
and reused; at most `connections` requests are under way at once. A configuration that goes
through a proxy is served by the `Api` itself, on a thread: no proxy code is written here.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Callable
from urllib.parse import urlencode, urlsplit

import httptools
import urllib3

from .api import REQUEST_TIMEOUT, Api, ApiError, Reply

CONNECTIONS = 16  # requests under way at once; kube-scheduler binds a few pods at a time


class _Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection: one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future | None = None
        self.body: list[bytes] = []
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(ConnectionError(f"unreadable answer: {e}"))

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._fail(ConnectionError("the API server closed the connection"))

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_result((self.parser.get_status_code(), b"".join(self.body),
                               self.parser.should_keep_alive()))
        self.body = []

    def _fail(self, error: Exception) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)
        self.close()

    def send(self, request: bytes) -> asyncio.Future:
        self.answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self.answer

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Stream(asyncio.Protocol):
    """One watch's connection: the answer's body handed on line by line as it comes. `done`:
    (status, the body of an answer other than 200) once the answer ends; the error else."""

    def __init__(self, on_line: Callable[[bytes], bool], loop: asyncio.AbstractEventLoop) -> None:
        self.on_line, self.loop = on_line, loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future = loop.create_future()
        self.last_read = loop.time()
        self.status = 0
        self.rest = b""  # a line not whole yet
        self.body: list[bytes] = []  # of an answer other than 200

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.last_read = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._end(error=ConnectionError(f"unreadable answer: {e}"))

    def connection_lost(self, exc) -> None:
        self._end(error=ConnectionError("the API server closed the connection"))

    # httptools callbacks
    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.status != 200:
            self.body.append(body)
            return
        *lines, self.rest = (self.rest + body).split(b"\n")
        for line in lines:
            if not line or self.done.done():
                continue
            try:
                more = self.on_line(line)
            except Exception as e:  # the caller's error, or a line it cannot read: ends the watch
                self._end(error=e)
                return
            if more is False:
                self._end()

    def on_message_complete(self) -> None:
        self._end()

    def _end(self, error: Exception | None = None) -> None:
        if not self.done.done():
            if error is not None:
                self.done.set_exception(error)
            else:
                self.done.set_result((self.status, b"".join(self.body)))
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def ssl_context(cfg) -> ssl.SSLContext:
    """The TLS settings the kubernetes client gives urllib3 (rest.RESTClientObject)."""
    ctx = ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    if cfg.ssl_ca_cert or cfg.ca_cert_data:
        ctx.load_verify_locations(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


class AsyncApi:
    def __init__(self, api: Api, connections: int = CONNECTIONS):
        self.api = api
        cfg = api.api_client.configuration
        url = urlsplit(cfg.host)
        self.host, self.prefix = url.hostname or "", url.path.rstrip("/")
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl_context(cfg) if url.scheme == "https" else None
        self.server_hostname = (cfg.tls_server_name or self.host) if self.ssl else None
        self.host_header = url.netloc.rpartition("@")[2]
        self.proxied = isinstance(api.api_client.rest_client.pool_manager, urllib3.ProxyManager)
        self.connections = connections
        self._slots: asyncio.Semaphore | None = None  # made on the loop that uses it
        self._idle: list[_Connection] = []

    async def call(self, method: str, path: str, query: dict | None = None, body=None,
                   content_type: str = "application/json", timeout: float = REQUEST_TIMEOUT) -> Reply:
        """As `Api.call`: the Reply, or ApiError when the server was not reached or the
        answer broke off (a write may then have happened)."""
        if self.proxied:
            return await asyncio.get_running_loop().run_in_executor(
                None, lambda: self.api.call(method, path, query, body, content_type, timeout=timeout))
        request = self._request(method, path, query, body, content_type)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.connections)
        async with self._slots:
            conn, answer = None, None
            try:
                async with asyncio.timeout(timeout):
                    conn = await self._connection()
                    answer = await conn.send(request)
            except (OSError, EOFError, TimeoutError, ssl.SSLError) as e:
                raise ApiError(f"{method} {path}: {type(e).__name__}: {e}") from None
            finally:  # a connection is reused only after a whole answer that lets it be
                if conn is not None:
                    if answer is not None and answer[2] and not conn.closed:
                        self._idle.append(conn)
                    else:
                        conn.close()
        return Reply.of(answer[0], answer[1])

    async def watch(self, path: str, query: dict, read_timeout: float,
                    on_line: Callable[[bytes], bool]) -> Reply:
        """A watch on its own connection: `on_line(line)` for each line of the answer as it is
        read, until the server ends it or `on_line` answers False. The Reply: the status, and
        for a status other than 200 the body. ApiError when the server cannot be reached, the
        answer breaks off, nothing comes for `read_timeout` seconds (a connection dropped
        without a word), or `on_line` raises. Not for a proxied configuration (`proxied`)."""
        loop = asyncio.get_running_loop()
        stream = None
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                _, stream = await loop.create_connection(
                    lambda: _Stream(on_line, loop), self.host, self.port, ssl=self.ssl,
                    server_hostname=self.server_hostname)
            stream.transport.write(self._request("GET", path, query, None, ""))
            while not stream.done.done():  # wakes once per read_timeout to see whether it is silent
                await asyncio.wait([stream.done], timeout=read_timeout)
                if not stream.done.done() and loop.time() - stream.last_read >= read_timeout:
                    raise TimeoutError(f"nothing read for {read_timeout:g}s")
            status, body = stream.done.result()
        except (OSError, EOFError, TimeoutError, ssl.SSLError, ValueError) as e:
            raise ApiError(f"watch {path}: {type(e).__name__}: {e}") from None
        finally:
            if stream is not None:
                if not stream.done.done():
                    stream.done.cancel()  # what the closing says is of no interest now
                stream.close()
        return Reply.of(status, body)

    def _request(self, method: str, path: str, query: dict | None, body, content_type: str) -> bytes:
        target = self.prefix + path + ("?" + urlencode(query) if query else "")
        payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}", "Accept: application/json",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append(f"Content-Type: {content_type}")
        head += [f"{k}: {v}" for k, v in self.api.auth_headers().items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:  # the server may have closed an idle one since
                return conn
        _, conn = await asyncio.get_running_loop().create_connection(
            _Connection, self.host, self.port, ssl=self.ssl, server_hostname=self.server_hostname)
        return conn
