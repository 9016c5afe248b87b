import pytest

from tests.kube.recorder import serve


@pytest.fixture
def server():
    """A recording HTTP server on 127.0.0.1 (tests/kube/recorder.py)."""
    srv = serve()
    yield srv
    srv.shutdown()
    srv.server_close()
