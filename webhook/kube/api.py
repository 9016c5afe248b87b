"""The one API client: JSON requests to the API server over HTTP/1.1 on an asyncio event loop.

Every Kubernetes call of the project goes through here: the extender's binds and reads on its
own event loop, the allocator's on its I/O loop (kube/io_loop.py), the watches (informer.py),
and the blocking callers (the `cards` command, the start-up probe) through `io_loop.run_blocking`.
Asynchronous, because the extender answers kube-scheduler on one event loop, where a call made
through a blocking client cost a thread hand-off each way and urllib3's layers: 0.40 ms of CPU
per pods/binding, against 0.09 ms as one write of the whole request and a parse of the answer
by httptools (measured side by side on the test API server). On a scheduler that decides one
pod at a time, that CPU is the pace.

The configuration (a kubeconfig, the in-cluster config) gives the server, the TLS material,
the Authorization header and a proxy. The common kubeconfigs and the in-cluster config are read
by client_config.py, to the values the kubernetes client's loader gives; that loader, imported
only then (`import kubernetes` is 0.22 s of every start), reads whatever client_config.py
declines (exec and auth-provider users, proxies...). A proxy is used
as urllib3 (the kubernetes client's transport) uses it: an https server through a CONNECT
tunnel, an http server with the whole URL on the request line. The Authorization header is
asked of the configuration once per `AUTH_EVERY` seconds, not per call: its refresh hook
re-reads the whole environment for proxies each time it runs (75 µs a call, some 7% of the CPU
of an extender's bind). The cost: a token that expires is still sent for up to `AUTH_EVERY`
seconds (the in-cluster loader re-reads its token only once a minute anyway, and the kubelet
rotates that token long before it expires).

Connections are kept alive and reused; at most `connections` requests are under way at once.
Connections belong to an event loop: each loop that calls has its own.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Union
from urllib.parse import urlencode, urlsplit

import httptools

from ..base import fast_json
from . import client_config

if TYPE_CHECKING:
    from kubernetes import client

# What Api reads: the fast path's settings, or the kubernetes loader's.
Configuration = Union[client_config.ClientConfig, "client.Configuration"]

REQUEST_TIMEOUT = 5.0  # seconds, for every call that is not a watch
AUTH_EVERY = 10.0  # seconds between two reads of the Authorization header from the configuration
CONNECTIONS = 16  # requests under way at once; kube-scheduler binds a few pods at a time


@dataclass
class Reply:
    status: int
    body: dict | None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def of(cls, status: int, raw: bytes) -> "Reply":
        """The reply to a JSON request: a body that is not a JSON object is None."""
        try:
            parsed = fast_json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return cls(status, parsed if isinstance(parsed, dict) else None)

    def message(self) -> str:
        if isinstance(self.body, dict) and self.body.get("message"):
            return f"{self.status} {self.body['message']}"
        return str(self.status)


class KubeconfigError(Exception):
    """A configuration that cannot be used (a kubeconfig the loader refuses, a proxy of a kind
    not supported); the message names it and why, in one line."""


class ApiError(Exception):
    """The API server could not be reached (connection refused, timeout, TLS...), or the answer
    broke off. `reason`: why, in a few words."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


NOT_REACHED = (OSError, EOFError, TimeoutError, ssl.SSLError, ValueError)


def _not_reached(what: str, e: BaseException) -> ApiError:
    if isinstance(e, TimeoutError) and not str(e):
        reason = "timed out"
    elif isinstance(e, OSError) and not isinstance(e, ssl.SSLError) and e.errno:
        reason = os.strerror(e.errno)  # "Connection refused", not asyncio's "Connect call failed"
    else:
        reason = str(e) or type(e).__name__
    return ApiError(f"{what}: {type(e).__name__}: {str(e) or reason}", reason)


def client_configuration(kubeconfig: str | None, description: str | None = None) -> Configuration:
    """The client settings of a kubeconfig (a file or a colon-separated list; None: in-cluster).
    A source the loader cannot use is a KubeconfigError naming it (`description`, else the path).
    client_config.py reads the common ones; the kubernetes loader the rest, and makes the errors."""
    fast = client_config.load(kubeconfig)
    if fast is not None:
        return fast
    from kubernetes import client
    from kubernetes import config as kube_config

    cfg = client.Configuration()
    try:
        if kubeconfig:
            kube_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg,
                                         persist_config=False)
        else:
            kube_config.load_incluster_config(client_configuration=cfg)
    except Exception as e:  # the loader raises many kinds for a file it cannot use
        where = description or (f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster config")
        raise KubeconfigError(f"{where}: cannot use it: {e}") from None
    return cfg


def ssl_context(cfg: Configuration) -> ssl.SSLContext:
    """The TLS settings the kubernetes client gives urllib3 (rest.RESTClientObject): the
    configured CA alone when there is one, as urllib3 and client-go trust it (the system's
    store, loaded besides, took 20 ms of every start: the extender's first bind waits for it);
    the system's store otherwise."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None,
                                     cadata=cfg.ca_cert_data or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _bypasses_proxy(host: str, no_proxy: str | None) -> bool:
    """Whether `no_proxy` exempts `host`, as the kubernetes client decides it. Only a
    configuration with a proxy asks, and only the kubernetes loader's have one: the package is
    loaded by then."""
    from kubernetes.client.rest import should_bypass_proxies

    return should_bypass_proxies(host, no_proxy or "")


class _Connection(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection: one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future | None = None
        self.timer: asyncio.TimerHandle | None = None  # the answer's deadline
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
        self._stop_timer()
        if answer is not None and not answer.done():
            answer.set_result((self.parser.get_status_code(), b"".join(self.body),
                               self.parser.should_keep_alive()))
        self.body = []

    def _fail(self, error: Exception) -> None:
        answer, self.answer = self.answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)
        self.close()

    def send(self, request: bytes, timeout: float) -> asyncio.Future:
        """The answer, or TimeoutError after `timeout` seconds (the connection is then closed:
        a late answer would be taken for the next request's). A timer of the connection's own:
        `asyncio.timeout` around the await cost a tenth of a call's CPU."""
        loop = asyncio.get_running_loop()
        self.answer = loop.create_future()
        self.timer = loop.call_later(timeout, self._fail, TimeoutError())
        self.transport.write(request)
        return self.answer

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def close(self) -> None:
        self.closed = True
        self._stop_timer()
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


class _Tunnel(asyncio.Protocol):
    """A connection to a proxy until it answers the CONNECT: `answered` gets the status line."""

    def __init__(self) -> None:
        self.answered: asyncio.Future = asyncio.get_running_loop().create_future()
        self.head = b""

    def data_received(self, data: bytes) -> None:
        self.head += data
        if b"\r\n\r\n" in self.head and not self.answered.done():
            self.answered.set_result(self.head.split(b"\r\n", 1)[0].decode("latin-1"))

    def connection_lost(self, exc) -> None:
        if not self.answered.done():
            self.answered.set_exception(ConnectionError("the proxy closed the connection"))


class _Pool:
    """One event loop's connections: the idle ones, and the bound on requests under way."""

    def __init__(self, connections: int) -> None:
        self.slots = asyncio.Semaphore(connections)
        self.idle: list[_Connection] = []


class Api:
    def __init__(self, configuration: Configuration, connections: int = CONNECTIONS):
        self.configuration = cfg = configuration
        url = urlsplit(cfg.host)
        self.host, self.prefix = url.hostname or "", url.path.rstrip("/")
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.ssl = ssl_context(cfg) if url.scheme == "https" else None
        self.server_hostname = (cfg.tls_server_name or self.host) if self.ssl else None
        self.host_header = url.netloc.rpartition("@")[2]
        self.origin = f"{url.scheme}://{self.host_header}"  # a forward proxy's request line
        self.proxy = None  # (host, port) of the proxy in the way, if any
        if cfg.proxy and not _bypasses_proxy(cfg.host, cfg.no_proxy):
            proxy = urlsplit(cfg.proxy)
            if proxy.scheme != "http":
                raise KubeconfigError(f"proxy {cfg.proxy}: only http:// proxies are supported")
            self.proxy = (proxy.hostname or "", proxy.port or 80)
        self.proxy_headers = dict(cfg.proxy_headers or {})
        self.connections = connections
        self._pools: dict[asyncio.AbstractEventLoop, _Pool] = {}
        self._auth: tuple[float, dict[str, str]] = (float("-inf"), {})

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None, connections: int = CONNECTIONS) -> "Api":
        """`kubeconfig`: a file or a colon-separated list; None: the in-cluster config."""
        return cls(client_configuration(kubeconfig), connections)

    def auth_headers(self) -> dict[str, str]:
        at, headers = self._auth
        if time.monotonic() - at < AUTH_EVERY:
            return headers
        headers = {}  # what the kubernetes client would add for the BearerToken setting
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        self._auth = (time.monotonic(), headers)
        return headers

    async def call(self, method: str, path: str, query: dict | None = None, body=None,
                   content_type: str = "application/json", timeout: float = REQUEST_TIMEOUT) -> Reply:
        """The Reply; ApiError when the server was not reached or the answer broke off (a write
        may then have happened)."""
        request = self._request(method, path, query, body, content_type)
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = _Pool(self.connections)
        async with pool.slots:
            conn, answer = None, None
            try:
                conn = await self._connection(pool, timeout)
                answer = await conn.send(request, timeout)
            except NOT_REACHED as e:
                raise _not_reached(f"{method} {path}", e) from None
            finally:  # a connection is reused only after a whole answer that lets it be
                if conn is not None:
                    if answer is not None and answer[2] and not conn.closed:
                        pool.idle.append(conn)
                    else:
                        conn.close()
        return Reply.of(answer[0], answer[1])

    async def watch(self, path: str, query: dict, read_timeout: float,
                    on_line: Callable[[bytes], bool]) -> Reply:
        """A watch on its own connection: `on_line(line)` for each line of the answer as it is
        read, until the server ends it or `on_line` answers False. The Reply: the status, and
        for a status other than 200 the body. ApiError when the server cannot be reached, the
        answer breaks off, nothing comes for `read_timeout` seconds (a connection dropped
        without a word), or `on_line` raises."""
        loop = asyncio.get_running_loop()
        stream = None
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                stream = await self._open(lambda: _Stream(on_line, loop))
            stream.transport.write(self._request("GET", path, query, None, ""))
            while not stream.done.done():  # wakes once per read_timeout to see whether it is silent
                await asyncio.wait([stream.done], timeout=read_timeout)
                if not stream.done.done() and loop.time() - stream.last_read >= read_timeout:
                    raise TimeoutError(f"nothing read for {read_timeout:g}s")
            status, body = stream.done.result()
        except NOT_REACHED as e:
            raise _not_reached(f"watch {path}", e) from None
        finally:
            if stream is not None:
                if not stream.done.done():
                    stream.done.cancel()  # what the closing says is of no interest now
                stream.close()
        return Reply.of(status, body)

    def _request(self, method: str, path: str, query: dict | None, body, content_type: str) -> bytes:
        target = self.prefix + path + ("?" + urlencode(query) if query else "")
        if self.proxy is not None and self.ssl is None:  # a forward proxy: the whole URL
            target = self.origin + target
        payload = b"" if body is None else fast_json.dumps(body)
        head = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}", "Accept: application/json",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append(f"Content-Type: {content_type}")
        head += [f"{k}: {v}" for k, v in self.auth_headers().items()]
        if self.proxy is not None and self.ssl is None:
            head += [f"{k}: {v}" for k, v in self.proxy_headers.items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload

    async def _connection(self, pool: _Pool, timeout: float) -> _Connection:
        """An idle connection, or a new one opened within `timeout` seconds (the answer then
        has `timeout` seconds of its own)."""
        while pool.idle:
            conn = pool.idle.pop()
            if not conn.closed:  # the server may have closed an idle one since
                return conn
        async with asyncio.timeout(timeout):
            return await self._open(_Connection)

    async def _open(self, protocol: Callable[[], asyncio.Protocol]):
        """A new connection to the API server with `protocol()` on it: directly, or through
        the proxy (for https, a CONNECT tunnel with TLS inside)."""
        loop = asyncio.get_running_loop()
        if self.proxy is None:
            _, proto = await loop.create_connection(protocol, self.host, self.port, ssl=self.ssl,
                                                    server_hostname=self.server_hostname)
            return proto
        if self.ssl is None:
            _, proto = await loop.create_connection(protocol, *self.proxy)
            return proto
        transport, tunnel = await loop.create_connection(_Tunnel, *self.proxy)
        try:
            authority = f"{self.host}:{self.port}" if ":" not in self.host else f"[{self.host}]:{self.port}"
            head = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
            head += [f"{k}: {v}" for k, v in self.proxy_headers.items()]
            transport.write(("\r\n".join(head) + "\r\n\r\n").encode())
            status_line = await tunnel.answered
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or parts[1] != "200":
                raise ConnectionError(f"the proxy refused the tunnel: {status_line}")
            proto = protocol()
            tls = await loop.start_tls(transport, proto, self.ssl,
                                       server_hostname=self.server_hostname)
        except BaseException:
            transport.close()
            raise
        proto.connection_made(tls)
        return proto
