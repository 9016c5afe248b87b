"""The extender's socket listens before the program's imports (webhook/base/listen.py):
a connection made then waits in the backlog instead of being refused."""

import socket

import pytest

from tests.harness.kube import free_ports
from webhook.base import listen


def test_a_loopback_bind_listens_at_once_and_is_handed_over():
    (port,) = free_ports(1)
    value = f"127.0.0.1:{port}"
    listen.listen_early(["extender", "--config", "c.yaml", "--bind", value])
    try:
        assert listen.holds(value)
        with socket.create_connection(("127.0.0.1", port), timeout=2):  # nobody accepts yet
            pass
    finally:
        sock = listen.take(value)
    assert sock is not None and not listen.holds(value)
    sock.close()


@pytest.mark.parametrize("argv", [
    ["allocate", "--bind", "127.0.0.1:{port}"],  # only the extender
    ["extender", "--bind", "0.0.0.0:{port}"],  # not loopback: the normal start refuses it
    ["extender", "--bind", "localhost:{port}"],  # a name, not an address: the normal start reads it
    ["extender", "--bind"],
    ["extender", "--bind", "127.0.0.1:99999"],
    ["extender", "--bind", "::1:{port}"],  # IPv6 unbracketed: `parse` refuses it, as the checks do
])
def test_anything_else_is_left_to_the_normal_start(argv):
    (port,) = free_ports(1)
    argv = [a.format(port=port) for a in argv]
    listen.listen_early(argv)
    assert not any(listen.holds(a) for a in argv)


def test_the_default_bind_is_the_extenders():
    assert listen._bind_value(["--config", "x"]) == "127.0.0.1:8888"
    assert listen._bind_value(["--bind=127.0.0.1:9"]) == "127.0.0.1:9"
