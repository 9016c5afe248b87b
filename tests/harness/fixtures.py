"""pytest plugin: one real etcd + kube-apiserver for the whole test session, and the fixtures
the allocator's, the extender's and the faults' cluster tests share.

Load it with `pytest_plugins = ["tests.harness.fixtures"]` in the top-level conftest.
"""

import uuid

import kubernetes.client as k
import pytest

from tests.harness.allocator import ALLOCATOR_USER, AllocatorProcess, grant_allocator_rbac
from tests.harness.kube import ADMIN, FakeFleet, LocalCluster, ensure_namespace

LEASE_NS = "mthreads-system"  # where the tests' allocators hold their Lease


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("kube")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def admin(kube_cluster):
    """The admin's client; the allocator's RBAC (the extender binds as the same identity)."""
    client = kube_cluster.api_client(ADMIN)
    grant_allocator_rbac(client)
    ensure_namespace(client, LEASE_NS)
    return client


@pytest.fixture
def fleet(admin):
    """Fake nodes labelled for this test only (`fleet.selector` picks them); deleted afterwards."""
    tag = f"x{uuid.uuid4().hex[:6]}"
    made = FakeFleet(admin, tag, labels={"fleet": tag})
    made.selector = {"fleet": tag}
    yield made
    made.delete()


@pytest.fixture
def namespace(admin):
    name = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name)
    yield name
    k.CoreV1Api(admin).delete_collection_namespaced_pod(name, grace_period_seconds=0)


@pytest.fixture
def priorities(admin):
    """PriorityClasses low (10) and high (1000) for one test; deleted afterwards."""
    tag = uuid.uuid4().hex[:6]
    api = k.SchedulingV1Api(admin)
    made = {}
    for level, value in (("low", 10), ("high", 1000)):
        name = f"{level}-{tag}"
        api.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                   "metadata": {"name": name}, "value": value})
        made[level] = name
    yield made
    for name in made.values():
        api.delete_priority_class(name)


@pytest.fixture
def start_allocator(kube_cluster, admin, tmp_path):
    """Start allocator processes; all are stopped by PID at the end of the test."""
    started: list[AllocatorProcess] = []
    config = tmp_path / "config.yaml"
    config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")

    def start(name: str = "a") -> AllocatorProcess:
        proc = AllocatorProcess(kube_cluster.kubeconfig(ALLOCATOR_USER), LEASE_NS,
                                tmp_path / f"allocator-{name}-{len(started)}.log", config).start()
        started.append(proc)
        return proc

    yield start
    for p in started:
        p.stop(timeout=10)  # SIGTERM releases the lease, so the next test's allocator need not wait 15 s
        print(f"--- {p.log_path.name} (tail) ---\n{p.tail(40)}")
