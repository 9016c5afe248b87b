"""The RBAC of manifests/base, applied to an API server and checked with `kubectl auth can-i`.

This module starts an etcd + kube-apiserver of its own: the session's cluster is shared with
the allocator tests, which grant the same allocator identity rights of their own (and a
ClusterRole of the same name), so answers there would not be the manifests' alone.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from tests.harness.kube import ADMIN, LocalCluster
from tests.harness.kubectl import KUBECTL, kubectl
from tests.harness.registration import rendered_manifests
from tests.harness.wait import wait_for

pytestmark = pytest.mark.cluster

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
ALLOCATOR_SA = "system:serviceaccount:kube-system:mthreads-allocator"
WEBHOOK_SA = "system:serviceaccount:kube-system:mthreads-webhook"
NOBODY_SA = "system:serviceaccount:kube-system:nobody-at-all"  # bound to nothing: the baseline


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("rbac-kube")).start()
    try:
        docs = [d for d in rendered_manifests() if d["kind"] in RBAC_KINDS]
        assert {d["kind"] for d in docs} == set(RBAC_KINDS)
        assert kubectl(c, ADMIN, "create", "namespace", "other").returncode == 0
        out = kubectl(c, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert out.returncode == 0, out.stderr
        c.admin_kubeconfig = str(c.kubeconfig(ADMIN))
        # the authorizer's cache catches up in a moment
        wait_for(lambda: can_i(c, ALLOCATOR_SA, "list", "pods") is True, 10,
                 what="the manifests' RBAC taking effect")
        yield c
    finally:
        c.stop()


def can_i(cluster, user: str, *args: str) -> bool:
    # The harness rewrites the kubeconfig on every call; threads share one written once.
    if not hasattr(cluster, "admin_kubeconfig"):
        cluster.admin_kubeconfig = str(cluster.kubeconfig(ADMIN))
    out = subprocess.run([KUBECTL, "--kubeconfig", cluster.admin_kubeconfig, "auth", "can-i", *args,
                          f"--as={user}"], capture_output=True, text=True, timeout=60)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), out.stderr
    return answer == "yes"


LEASE = "leases.coordination.k8s.io"

ALLOCATOR_MUST = [
    ("list", "pods", "--all-namespaces"),
    ("watch", "pods", "--all-namespaces"),
    ("get", "pods", "-n", "default"),
    ("create", "pods", "--subresource=binding", "-n", "default"),
    ("patch", "pods", "--subresource=status", "-n", "default"),
    ("list", "nodes"),
    ("watch", "nodes"),
    ("create", "events", "-n", "default"),
    ("create", "events.events.k8s.io", "-n", "default"),
    ("get", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("update", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("create", LEASE, "-n", "kube-system"),
]
ALLOCATOR_MUST_NOT = [
    ("create", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),
    ("update", "pods", "-n", "default"),
    ("update", "nodes"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("patch", "nodes", "--subresource=status"),
    ("get", "secrets", "-n", "kube-system"),
    ("list", "secrets", "--all-namespaces"),
    ("get", "configmaps", "-n", "kube-system"),
    ("update", f"{LEASE}/kube-scheduler", "-n", "kube-system"),
    ("update", f"{LEASE}/other", "-n", "kube-system"),
    ("delete", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("list", LEASE, "-n", "kube-system"),
    ("get", f"{LEASE}/mthreads-allocator", "-n", "other"),
    ("update", f"{LEASE}/mthreads-allocator", "-n", "other"),
    ("create", LEASE, "-n", "other"),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("delete", "validatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("create", "serviceaccounts", "--subresource=token", "-n", "kube-system"),
    ("impersonate", "users"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("*", "*"),
]
WEBHOOK_MUST_NOT = [
    ("list", "pods", "--all-namespaces"),
    ("get", "pods", "-n", "default"),
    ("get", "secrets", "-n", "kube-system"),
    ("list", "secrets", "--all-namespaces"),
    ("get", "configmaps", "-n", "kube-system"),
    ("list", "nodes"),
    ("create", "pods", "--subresource=binding", "-n", "default"),
    ("patch", "pods", "--subresource=status", "-n", "default"),
    ("create", "events", "-n", "default"),
    ("get", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("create", LEASE, "-n", "kube-system"),
    ("update", "mutatingwebhookconfigurations.admissionregistration.k8s.io"),
    ("*", "*"),
]


@pytest.fixture(scope="module")
def answers(cluster) -> dict:
    """Every `kubectl auth can-i` below, asked a few at a time (each kubectl takes a while)."""
    questions = [(ALLOCATOR_SA, a) for a in ALLOCATOR_MUST + ALLOCATOR_MUST_NOT] + \
        [(WEBHOOK_SA, a) for a in WEBHOOK_MUST_NOT]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = pool.map(lambda q: can_i(cluster, q[0], *q[1]), questions)
        return dict(zip(questions, results))


@pytest.mark.parametrize("args", ALLOCATOR_MUST, ids=" ".join)
def test_the_allocator_may(answers, args):
    assert answers[ALLOCATOR_SA, args]


@pytest.mark.parametrize("args", ALLOCATOR_MUST_NOT, ids=" ".join)
def test_the_allocator_may_not(answers, args):
    assert not answers[ALLOCATOR_SA, args]


@pytest.mark.parametrize("args", WEBHOOK_MUST_NOT, ids=" ".join)
def test_the_webhook_may_not(answers, args):
    assert not answers[WEBHOOK_SA, args]


def test_the_webhook_has_nothing_beyond_what_every_account_has(cluster):
    """`can-i --list` for the webhook equals that of an account bound to nothing."""
    def rights(user: str) -> str:
        out = kubectl(cluster, ADMIN, "auth", "can-i", "--list", f"--as={user}", "-n", "kube-system")
        assert out.returncode == 0, out.stderr
        return out.stdout
    assert rights(WEBHOOK_SA) == rights(NOBODY_SA)
    assert rights(ALLOCATOR_SA) != rights(NOBODY_SA)  # the check can tell


def test_the_service_accounts_exist_and_the_webhook_mounts_no_token(cluster):
    for name in ("mthreads-allocator", "mthreads-webhook"):
        out = kubectl(cluster, ADMIN, "get", "serviceaccount", name, "-n", "kube-system", "-o", "yaml")
        assert out.returncode == 0, out.stderr
    webhook = yaml.safe_load(kubectl(cluster, ADMIN, "get", "serviceaccount", "mthreads-webhook",
                                     "-n", "kube-system", "-o", "yaml").stdout)
    assert webhook.get("automountServiceAccountToken") is False
