"""The local etcd + kube-apiserver harness itself, against the real server."""

import json
import subprocess
import uuid

import pytest
import requests
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.harness.kube import ADMIN, ALICE, ALLOCATOR, make_fake_node, set_node_ready
from tests.harness.kubectl import KUBECTL
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster


def unique(prefix: str) -> str:
    """A fresh name: the cluster lives for the whole session and namespaces never go away."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True, scope="module")
def _nodes_removed_after(kube_cluster):
    """Delete the fake nodes made here: ready Mthreads capacity left behind would be a place
    for the allocator tests' pods, which count where theirs land."""
    core = client.CoreV1Api(kube_cluster.api_client(ADMIN))
    before = {n.metadata.name for n in core.list_node().items}
    yield
    for n in core.list_node().items:
        if n.metadata.name not in before:
            core.delete_node(n.metadata.name)


def test_readyz(kube_cluster):
    response = requests.get(
        f"{kube_cluster.url}/readyz",
        headers={"Authorization": f"Bearer {kube_cluster.token(ADMIN)}"},
        verify=str(kube_cluster.ca_file),
        timeout=5,
    )
    assert response.status_code == 200
    assert response.text == "ok"


def test_admin_creates_namespace_and_fake_node(kube_cluster):
    admin = kube_cluster.api_client(ADMIN)
    core = client.CoreV1Api(admin)
    namespace = unique("ns")
    core.create_namespace({"metadata": {"name": namespace}})
    assert core.read_namespace(namespace).status.phase == "Active"

    name = unique("node")
    make_fake_node(admin, name, cards=8, units_per_card=96)
    node = core.read_node(name)
    assert node.status.capacity["mthreads.com/sgpu-core"] == "128"
    assert node.status.capacity["mthreads.com/sgpu-memory"] == "768"
    assert node.status.allocatable == node.status.capacity
    assert [(c.type, c.status) for c in node.status.conditions] == [("Ready", "True")]


def test_node_status_changes_only_through_the_status_subresource(kube_cluster):
    admin = kube_cluster.api_client(ADMIN)
    core = client.CoreV1Api(admin)
    name = unique("node")
    make_fake_node(admin, name, cards=1, units_per_card=160)

    core.patch_node(name, {"status": {"capacity": {"mthreads.com/sgpu-core": "999"}}})
    assert core.read_node(name).status.capacity["mthreads.com/sgpu-core"] == "16"

    set_node_ready(admin, name, False)
    assert core.read_node(name).status.conditions[0].status == "False"


def test_alice_is_forbidden_until_granted(kube_cluster):
    alice = client.CoreV1Api(kube_cluster.api_client(ALICE))
    with pytest.raises(ApiException) as denied:
        alice.list_pod_for_all_namespaces()
    assert denied.value.status == 403
    assert 'User "alice" cannot list resource "pods"' in json.loads(denied.value.body)["message"]

    rbac = client.RbacAuthorizationV1Api(kube_cluster.api_client(ADMIN))
    role = unique("pod-reader")
    rbac.create_cluster_role(
        {"metadata": {"name": role}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": ALICE}],
        }
    )
    try:
        # a 403 until the authorizer's cache catches up with the new binding
        wait_for(alice.list_pod_for_all_namespaces, 10, 0.1, what="alice allowed to list pods",
                 retry_on=(ApiException,))
    finally:
        rbac.delete_cluster_role_binding(role)
        rbac.delete_cluster_role(role)


def test_allocator_identity_authenticates(kube_cluster):
    # 403, not 401: the token is known, the service account just has no RBAC yet.
    allocator = client.CoordinationV1Api(kube_cluster.api_client(ALLOCATOR))
    with pytest.raises(ApiException) as denied:
        allocator.list_namespaced_lease("kube-system")
    assert denied.value.status == 403
    message = json.loads(denied.value.body)["message"]
    assert f'User "{ALLOCATOR}" cannot list resource "leases"' in message


class TestKubectl:
    def kubectl(self, cluster, *args, stdin=None):
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(cluster.kubeconfig(ADMIN)), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )

    def test_get_nodes(self, kube_cluster):
        name = unique("node")
        make_fake_node(kube_cluster.api_client(ADMIN), name, cards=2, units_per_card=96)
        result = self.kubectl(kube_cluster, "get", "nodes", "-o", "name")
        assert result.returncode == 0, result.stderr
        assert f"node/{name}" in result.stdout.split()

    @pytest.mark.parametrize("dry_run", [[], ["--dry-run=server"]], ids=["apply", "dry-run-server"])
    def test_apply(self, kube_cluster, dry_run):
        name = unique("cm")
        manifest = json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
             "data": {"k": "v"}}
        )
        result = self.kubectl(kube_cluster, "apply", *dry_run, "-f", "-", stdin=manifest)
        assert result.returncode == 0, result.stderr
        assert f"configmap/{name}" in result.stdout
        core = client.CoreV1Api(kube_cluster.api_client(ADMIN))
        names = [cm.metadata.name for cm in core.list_namespaced_config_map("default").items]
        assert (name in names) == (not dry_run)


def test_restart_apiserver_keeps_data(kube_cluster):
    core = client.CoreV1Api(kube_cluster.api_client(ADMIN))
    name = unique("cm")
    core.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"k": "v"}})

    kube_cluster.restart_apiserver()

    fresh = client.CoreV1Api(kube_cluster.api_client(ADMIN))
    assert fresh.read_namespaced_config_map(name, "default").data == {"k": "v"}
