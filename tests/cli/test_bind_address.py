"""HOST:PORT as the listening flags take it (webhook/bind_address.py)."""

import pytest

from webhook.bind_address import parse
from webhook.startup import USAGE, StartupError


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
