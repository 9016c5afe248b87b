import subprocess

import pytest

from tests.harness.compiled import stale
from tests.harness.process import LoggedProcess
from tests.harness.webhook import WebhookProcess, make_certs

pytest_plugins = ["tests.harness.fixtures"]

# What starts a process (gunicorn, kubectl, helm, the CLI...): a test module holding one of
# these is marked `process`, so `make test-unit` (-m "not cluster and not process") starts none.
_STARTERS = (subprocess, LoggedProcess, WebhookProcess, make_certs)


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and any(v is s for v in vars(module).values() for s in _STARTERS):
            item.add_marker("process")


def pytest_sessionstart(session):
    found = stale()
    if found:  # every test would run the code as it was built, not as it is
        pytest.exit("compiled modules older than their sources, run `make install`: "
                    + "; ".join(found), returncode=4)
