"""Check a HOST:PORT to listen on before a server is started on it.

gunicorn retries a port in use five times, logging each try, then exits; http.server
raises. Binding a throw-away socket first turns both into one line that names the flag.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from .startup import USAGE, StartupError


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
