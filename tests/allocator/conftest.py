import pytest

from tests.harness.kube import ADMIN, FakeFleet

from .kubetools import AllocatorProcess, ensure_namespace, grant_allocator_rbac

LEASE_NS = "mthreads-system"


@pytest.fixture(scope="session")
def admin(kube_cluster):
    client = kube_cluster.api_client(ADMIN)
    grant_allocator_rbac(client)
    ensure_namespace(client, LEASE_NS)
    return client


@pytest.fixture
def start_allocator(kube_cluster, admin, tmp_path):
    """Start allocator processes; all are stopped by PID at the end of the test."""
    from .kubetools import ALLOCATOR_USER
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
        try:  # SIGTERM releases the lease, so the next test's allocator need not wait 15 s
            p.terminate(timeout=10)
        except Exception:
            p.kill()
        print(f"--- {p.log_path.name} (tail) ---\n" + "\n".join(p.log().splitlines()[-40:]))


@pytest.fixture
def fleet(admin, request):
    """Make fake nodes for one test (unique names) and delete them afterwards."""
    tag = request.node.name.split("[")[0].replace("_", "-")[-20:].strip("-")
    made = FakeFleet(admin, tag)
    yield made
    made.delete()


@pytest.fixture
def namespace(admin, request):
    import uuid
    import kubernetes.client as k
    name = f"t-{uuid.uuid4().hex[:8]}"
    ensure_namespace(admin, name)
    yield name
    core = k.CoreV1Api(admin)
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
