"""A HOST:PORT to listen on: parsed once, checked before a server starts on it, and the
extender's socket listening before the rest of the program is imported.

gunicorn retries a port in use five times, logging each try, then exits; http.server
raises. Binding a throw-away socket first turns both into one line that names the flag.

kube-scheduler and the extender start together (two containers of one pod), and kube-scheduler
is ready to call first: a call to a port nobody listens on is refused, a scheduling error that
costs its pod a backoff. Listening takes a few milliseconds after the interpreter starts, the
imports and the first list take a few hundred: a call that comes meanwhile waits in the
socket's backlog and is answered once the extender has listed the cluster. Only the standard
library is used here, and only a loopback `--bind` is taken early (the extender listens on
nothing else, and the normal start checks and reports every other value).
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from .startup import USAGE, StartupError

DEFAULT_BIND = "127.0.0.1:8888"  # the extender's --bind default
BACKLOG = 1024  # connections kube-scheduler may open before the first is answered

_held: dict[str, socket.socket] = {}


def parse(flag: str, value: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6-ADDRESS]:PORT` -> (host, port); an empty host means every address."""
    host, sep, port_text = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
    if not sep or (":" in host and not bracketed) or not port_text.isdigit() \
            or int(port_text) > 65535:
        raise StartupError(f"{flag} {value!r}: expected HOST:PORT with a port from 0 to 65535",
                           USAGE)
    return host, int(port_text)


def listen_address(flag: str, value: str) -> tuple[socket.AddressFamily, tuple]:
    """(address family, socket address) to listen on for `value`: an IPv6 address needs an
    AF_INET6 socket, which a server made for AF_INET cannot bind."""
    host, port = parse(flag, value)
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise StartupError(f"{flag} {value}: cannot resolve {host!r}: {e.strerror}", USAGE) from None
    return family, address


def check_bind(flag: str, value: str) -> None:
    """Raise StartupError unless a server could listen on `value` now."""
    host, port = parse(flag, value)
    family, address = listen_address(flag, value)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as gunicorn and http.server do: a port left in TIME_WAIT is not "in use"
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartupError(f"{flag} {value}: port {port} is in use") from None
            if e.errno == errno.EADDRNOTAVAIL:
                raise StartupError(f"{flag} {value}: {host} is not an address of this machine",
                                   USAGE) from None
            raise StartupError(f"{flag} {value}: cannot listen: {e.strerror}") from None


def check_loopback(flag: str, value: str) -> None:
    """Raise StartupError unless `value` listens on a loopback address only: what is served
    there trusts whoever can connect (the extender's verbs)."""
    _, address = listen_address(flag, value)
    if not ipaddress.ip_address(address[0]).is_loopback:
        raise StartupError(f"{flag} {value}: the extender's verbs must listen on a loopback "
                           "address (127.0.0.1 or [::1]) only, where only the kube-scheduler "
                           "beside it can call them (docs/extender.md)", USAGE)


def listen_early(argv: list[str]) -> None:
    """For `extender [...] [--bind HOST:PORT]` on a loopback address: bind and listen now."""
    if not argv or argv[0] != "extender":
        return
    value = _bind_value(argv[1:])
    if value is None:
        return
    try:
        host, port = parse("--bind", value)
    except StartupError:
        return  # the normal start says why in one line
    try:
        address = ipaddress.ip_address(host)
        if not address.is_loopback:
            return
        sock = socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                             socket.SOCK_STREAM)
    except (ValueError, OSError):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(address), port))
        sock.listen(BACKLOG)
    except (OSError, OverflowError):
        sock.close()  # the normal start says why in one line
        return
    _held[value] = sock


def _bind_value(args: list[str]) -> str | None:
    value = DEFAULT_BIND
    for i, a in enumerate(args):
        if a == "--bind":
            if i + 1 >= len(args):
                return None
            value = args[i + 1]
        elif a.startswith("--bind="):
            value = a.split("=", 1)[1]
    return value


def holds(value: str) -> bool:
    """Whether `value` (a --bind) is listening already."""
    return value in _held


def take(value: str) -> socket.socket | None:
    """The socket listening on `value`, now the caller's; None if there is none."""
    return _held.pop(value, None)
