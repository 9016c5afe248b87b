"""The extender's socket, listening before the rest of the program is imported.

kube-scheduler and the extender start together (two containers of one pod), and kube-scheduler
is ready to call first: a call to a port nobody listens on is refused, a scheduling error that
costs its pod a backoff. Listening takes a few milliseconds after the interpreter starts, the
imports and the first list take a few hundred: a call that comes meanwhile waits in the
socket's backlog and is answered once the extender has listed the cluster. Only the standard
library is used here, and only a loopback `--bind` is taken early (the extender listens on
nothing else, and the normal start checks and reports every other value).
"""

from __future__ import annotations

import ipaddress
import socket

DEFAULT_BIND = "127.0.0.1:8888"  # the extender's --bind default
BACKLOG = 1024  # connections kube-scheduler may open before the first is answered

_held: dict[str, socket.socket] = {}


def listen_early(argv: list[str]) -> None:
    """For `extender [...] [--bind HOST:PORT]` on a loopback address: bind and listen now."""
    if not argv or argv[0] != "extender":
        return
    value = _bind_value(argv[1:])
    if value is None:
        return
    host, _, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(host)
        if not address.is_loopback or not port.isdigit():
            return
        sock = socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                             socket.SOCK_STREAM)
    except (ValueError, OSError):
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(address), int(port)))
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
