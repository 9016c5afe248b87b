from typing import NamedTuple

import pytest

from tests.extender.messages import handler_setup
from tests.harness.allocator import ALLOCATOR_USER
from tests.harness.extender import Process, start_stack
from tests.harness.kube import ADMIN
from tests.harness.wait import wait_for


class Stack(NamedTuple):
    extender: Process
    scheduler: Process  # kube-scheduler


@pytest.fixture
def setup():
    """The extender app on a cache fed by hand and a fake API (tests/extender/messages.py)."""
    setup = handler_setup()
    yield setup
    setup.client.close()


@pytest.fixture(scope="module")
def stack(kube_cluster, admin, tmp_path_factory):
    """The extender and kube-scheduler for the module; stopped by PID at the end."""
    workdir = tmp_path_factory.mktemp("extender")
    extender, scheduler = start_stack(kube_cluster, workdir, ALLOCATOR_USER, ADMIN)
    try:
        wait_for(scheduler.healthy, 60, what="kube-scheduler /healthz")
        yield Stack(extender, scheduler)
    finally:
        codes = scheduler.stop(), extender.stop()
        for p in (scheduler, extender):
            print(f"--- {p.log_path.name} (tail) ---\n{p.tail(30)}")
        assert codes[1] == 0, f"extender exited with {codes[1]}"
