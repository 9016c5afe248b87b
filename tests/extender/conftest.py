import uuid

import kubernetes.client as k
import pytest

from tests.allocator.kubetools import ALLOCATOR_USER, ensure_namespace, grant_allocator_rbac, wait_for
from tests.harness.kube import ADMIN, FakeFleet

from .stack import start_stack


@pytest.fixture(scope="module")
def admin(kube_cluster):
    client = kube_cluster.api_client(ADMIN)
    grant_allocator_rbac(client)  # the extender binds as the allocator's identity
    return client


@pytest.fixture(scope="module")
def stack(kube_cluster, admin, tmp_path_factory):
    """The extender and kube-scheduler for the module; stopped by PID at the end."""
    workdir = tmp_path_factory.mktemp("extender")
    extender, scheduler = start_stack(kube_cluster, workdir, ALLOCATOR_USER, ADMIN)
    try:
        wait_for(extender.healthy, 30, what="extender /readyz")
        wait_for(scheduler.healthy, 60, what="kube-scheduler /healthz")
        yield extender, scheduler
    finally:
        codes = scheduler.stop(), extender.stop()
        for p in (scheduler, extender):
            print(f"--- {p.log_path.name} (tail) ---\n{p.tail(30)}")
        assert codes[1] == 0, f"extender exited with {codes[1]}"


@pytest.fixture
def fleet(admin):
    """Fake nodes labelled for this test only (pods select them); deleted afterwards."""
    tag = f"x{uuid.uuid4().hex[:6]}"
    made = FakeFleet(admin, tag, labels={"extender-test": tag})
    made.selector = {"extender-test": tag}
    yield made
    made.delete()


@pytest.fixture
def namespace(admin):
    name = f"x-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name)
    yield name
    k.CoreV1Api(admin).delete_collection_namespaced_pod(name, grace_period_seconds=0)
