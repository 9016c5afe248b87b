"""The RBAC of manifests/base (allocator mode) and manifests/extender (extender mode), applied
to an API server and checked with `kubectl auth can-i`. The two modes have disjoint identities
(mthreads-allocator; mthreads-scheduler, which kube-scheduler and its extender container share),
so both are applied to one API server; tests/chart checks that each mode renders only its own.

This module starts an etcd + kube-apiserver of its own: the session's cluster is shared with
the allocator tests, which grant the same allocator identity rights of their own (and a
ClusterRole of the same name), so answers there would not be the manifests' alone.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from tests.harness.kube import ADMIN, LocalCluster
from tests.harness.kubectl import KUBECTL, kubectl
from tests.harness.registration import rendered_manifests
from tests.harness.service_account import service_account_kubeconfig
from tests.harness.wait import wait_for
from webhook.kube.api import Api
from webhook.kube.pods import patch_pod_status
from webhook.model.annotations import REQUEUES

pytestmark = pytest.mark.cluster

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
ALLOCATOR_SA = "system:serviceaccount:kube-system:mthreads-allocator"
SCHEDULER_SA = "system:serviceaccount:kube-system:mthreads-scheduler"  # kube-scheduler + extender
WEBHOOK_SA = "system:serviceaccount:kube-system:mthreads-webhook"
NOBODY_SA = "system:serviceaccount:kube-system:nobody-at-all"  # bound to nothing: the baseline
# bound to kube-scheduler's built-in roles alone: what any kube-scheduler holds
REFERENCE_SCHEDULER = ("kube-system", "reference-kube-scheduler")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("rbac-kube")).start()
    try:
        docs = {}  # one of each object: both modes have the webhook's ServiceAccount
        for directory in ("manifests/base", "manifests/extender"):
            mode = [d for d in rendered_manifests(directory) if d["kind"] in RBAC_KINDS]
            assert {d["kind"] for d in mode} == set(RBAC_KINDS), directory
            docs.update({(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in mode})
        docs = list(docs.values())
        assert kubectl(c, ADMIN, "create", "namespace", "other").returncode == 0
        out = kubectl(c, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert out.returncode == 0, out.stderr
        ns, name = REFERENCE_SCHEDULER
        assert kubectl(c, ADMIN, "create", "serviceaccount", name, "-n", ns).returncode == 0
        for role in ("system:kube-scheduler", "system:volume-scheduler"):
            out = kubectl(c, ADMIN, "create", "clusterrolebinding", f"reference-{role.split(':')[1]}",
                          f"--clusterrole={role}", f"--serviceaccount={ns}:{name}")
            assert out.returncode == 0, out.stderr
        c.admin_kubeconfig = str(c.kubeconfig(ADMIN))
        # the authorizer's cache catches up in a moment
        wait_for(lambda: can_i(c, ALLOCATOR_SA, "list", "pods") and can_i(c, SCHEDULER_SA, "list", "pods"), 10,
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
    ("list", "namespaces"),  # their labels: affinity terms' namespaceSelector
    ("watch", "namespaces"),
    ("list", "csinodes.storage.k8s.io"),  # CSI attach limits
    ("watch", "csinodes.storage.k8s.io"),
    ("create", "events", "-n", "default"),
    ("patch", "events", "-n", "default"),
    ("get", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("update", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("create", LEASE, "-n", "kube-system"),
]
ALLOCATOR_MUST_NOT = [
    ("create", "pods", "-n", "default"),
    ("delete", "pods", "-n", "default"),
    ("update", "pods", "-n", "default"),
    ("patch", "pods", "-n", "default"),  # it never writes a pod itself, only Bindings
    ("update", "pods", "--subresource=status", "-n", "default"),  # its condition is a patch
    ("create", "events.events.k8s.io", "-n", "default"),  # it writes core events only
    ("update", "csinodes.storage.k8s.io"),  # read only: the kubelet writes them
    ("update", "nodes"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("patch", "nodes", "--subresource=status"),
    ("update", "namespaces"),  # it reads their labels only
    ("patch", "namespaces"),
    ("delete", "namespaces"),
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
# kube-scheduler's built-in roles (system:kube-scheduler, system:volume-scheduler) hold what a
# scheduler needs, pods delete for preemption and pods/status patch among it; the chart adds its
# own Lease and names the requeue's pods/status patch. Never a patch of pods themselves.
SCHEDULER_MUST = [
    ("list", "pods", "--all-namespaces"),
    ("watch", "pods", "--all-namespaces"),
    ("get", "pods", "-n", "default"),
    ("patch", "pods", "--subresource=status", "-n", "default"),  # the extender's requeue
    ("create", "pods", "--subresource=binding", "-n", "default"),
    ("list", "nodes"),
    ("watch", "nodes"),
    ("list", "namespaces"),  # the extender's watch of their labels
    ("watch", "namespaces"),
    ("watch", "csinodes.storage.k8s.io"),  # the extender's watch, system:kube-scheduler's right
    ("get", f"{LEASE}/mthreads-scheduler", "-n", "kube-system"),
    ("update", f"{LEASE}/mthreads-scheduler", "-n", "kube-system"),
]
SCHEDULER_MUST_NOT = [
    ("create", "pods", "-n", "default"),
    ("update", "pods", "-n", "default"),
    ("patch", "pods", "-n", "default"),  # the requeue writes pods/status; this rewrites any pod
    ("patch", "pods", "--all-namespaces"),
    ("update", "nodes"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("patch", "nodes", "--subresource=status"),
    ("update", "namespaces"),
    ("delete", "namespaces"),
    ("get", "secrets", "-n", "kube-system"),
    ("list", "secrets", "--all-namespaces"),
    ("get", "configmaps", "-n", "default"),
    ("update", f"{LEASE}/mthreads-allocator", "-n", "kube-system"),
    ("update", f"{LEASE}/mthreads-scheduler", "-n", "other"),
    ("delete", f"{LEASE}/mthreads-scheduler", "-n", "kube-system"),
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
        [(SCHEDULER_SA, a) for a in SCHEDULER_MUST + SCHEDULER_MUST_NOT] + \
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


@pytest.mark.parametrize("args", SCHEDULER_MUST, ids=" ".join)
def test_kube_scheduler_and_its_extender_may(answers, args):
    assert answers[SCHEDULER_SA, args]


@pytest.mark.parametrize("args", SCHEDULER_MUST_NOT, ids=" ".join)
def test_kube_scheduler_and_its_extender_may_not(answers, args):
    assert not answers[SCHEDULER_SA, args]


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


def rules_of(cluster, user: str, namespace: str) -> set[tuple[str, str, str]]:
    """`kubectl auth can-i --list` in `namespace` as (resource or URL, resource names, verb)."""
    out = kubectl(cluster, ADMIN, "auth", "can-i", "--list", f"--as={user}", "-n", namespace)
    assert out.returncode == 0, out.stderr
    rules = set()
    for line in out.stdout.splitlines()[1:]:
        m = re.match(r"^(\S*)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        assert m, line
        resource, urls, names, verbs = m.groups()
        rules |= {(resource or urls, names, verb) for verb in verbs.split()}
    return rules


# The namespaces' labels, which the extender's filter reads for affinity terms'
# namespaceSelector: kube-scheduler 1.20's built-in role lacks them (later ones list and watch them)
NAMESPACE_LABELS = {("namespaces", "", "list"), ("namespaces", "", "watch")}


@pytest.mark.parametrize("namespace, added", [
    ("default", NAMESPACE_LABELS),
    ("kube-system", {*NAMESPACE_LABELS, ("leases.coordination.k8s.io", "mthreads-scheduler", "get"),
                     ("leases.coordination.k8s.io", "mthreads-scheduler", "update"),
                     *(("configmaps", "extension-apiserver-authentication", v) for v in ("get", "list", "watch"))}),
])
def test_the_extender_mode_adds_to_kube_schedulers_roles_only_its_own_lease(cluster, namespace, added):
    """Extender mode's identity (kube-scheduler and the extender, one pod) against an account
    bound to kube-scheduler's built-in roles alone: beyond them, the namespaces' labels, the
    Lease mthreads-scheduler and the authentication reader kube-scheduler's /healthz needs. The requeue's pods/status
    patch, which the chart names for the extender, is one of the built-in rights."""
    ours = rules_of(cluster, SCHEDULER_SA, namespace)
    builtin = rules_of(cluster, "system:serviceaccount:{}:{}".format(*REFERENCE_SCHEDULER), namespace)
    assert ("pods/binding", "", "create") in builtin  # the extender's bind needs nothing of ours
    assert ("pods/status", "", "patch") in ours and ("pods", "", "patch") not in ours
    assert ours - builtin == added
    assert builtin <= ours


def test_the_service_accounts_exist_and_the_webhook_mounts_no_token(cluster):
    for name in ("mthreads-allocator", "mthreads-scheduler", "mthreads-webhook"):
        out = kubectl(cluster, ADMIN, "get", "serviceaccount", name, "-n", "kube-system", "-o", "yaml")
        assert out.returncode == 0, out.stderr
    webhook = yaml.safe_load(kubectl(cluster, ADMIN, "get", "serviceaccount", "mthreads-webhook",
                                     "-n", "kube-system", "-o", "yaml").stdout)
    assert webhook.get("automountServiceAccountToken") is False


def test_the_extenders_requeue_is_written_with_the_manifests_rights_alone(cluster, tmp_path):
    """The extender's requeue write (kube.pods.patch_pod_status, the merge patch it sends) as
    mthreads-scheduler, with a token of that ServiceAccount and the manifests' RBAC: the API
    server takes the annotation through pods/status; the same patch of the pod is refused."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "requeued", "namespace": "other"},
           "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "image": "busybox"}]}}
    created = kubectl(cluster, ADMIN, "create", "-f", "-", "-o", "json", stdin=json.dumps(pod))
    assert created.returncode == 0, created.stderr
    uid = json.loads(created.stdout)["metadata"]["uid"]
    api = Api.from_kubeconfig(str(service_account_kubeconfig(cluster, "kube-system", "mthreads-scheduler",
                                                             tmp_path)))
    patch = {"metadata": {"uid": uid, "annotations": {REQUEUES: "1"}}}

    async def writes():
        of_pod = await api.call("PATCH", "/api/v1/namespaces/other/pods/requeued", body=patch,
                                content_type="application/merge-patch+json")
        return await patch_pod_status(api, "other", "requeued", patch), of_pod.status

    (status, message), of_pod = asyncio.run(writes())
    assert status == 200, message
    assert of_pod == 403  # RBAC: no patch of pods
    stored = json.loads(kubectl(cluster, ADMIN, "get", "pod", "requeued", "-n", "other", "-o", "json").stdout)
    assert stored["metadata"]["annotations"][REQUEUES] == "1"
