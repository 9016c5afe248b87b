"""HOST:PORT as the listening flags take it (webhook/base/listen.py)."""

import socket

import pytest

from webhook.base.listen import listen_address, parse
from webhook.base.startup import USAGE, StartupError


@pytest.mark.parametrize("value, expected", [
    ("0.0.0.0:8443", ("0.0.0.0", 8443)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),
    (":9090", ("", 9090)),
    ("localhost:65535", ("localhost", 65535)),
    ("[::1]:8888", ("::1", 8888)),
])
def test_parse(value, expected):
    assert parse("--bind", value) == expected


@pytest.mark.parametrize("value", ["8443", "host:", "host:port", "1.2.3.4:65536", "::1:80",
                                   "[::1]", "1.2.3.4:-1", ""])
def test_malformed_is_a_usage_error(value):
    with pytest.raises(StartupError) as e:
        parse("--metrics-bind", value)
    assert e.value.exit_code == USAGE and str(e.value).startswith(f"--metrics-bind {value!r}:")


@pytest.mark.parametrize("value, family, address", [
    ("127.0.0.1:9090", socket.AF_INET, ("127.0.0.1", 9090)),
    ("0.0.0.0:0", socket.AF_INET, ("0.0.0.0", 0)),
    ("[::1]:9090", socket.AF_INET6, ("::1", 9090)),  # a server made for AF_INET cannot bind it
])
def test_listen_address_gives_the_family_the_host_needs(value, family, address):
    got_family, got = listen_address("--metrics-bind", value)
    assert (got_family, got[:2]) == (family, address)
