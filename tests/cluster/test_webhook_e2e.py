"""The seed's examples applied with kubectl through both webhooks of manifests/, on a real API server."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from tests.harness.kube import ADMIN, ALICE, ALLOCATOR
from tests.harness.kubectl import kubectl
from tests.harness.registration import REPO_ROOT, wait_until_called, webhook_configurations
from tests.harness.wait import wait_for
from tests.harness.webhook import WebhookProcess

pytestmark = pytest.mark.cluster

EXAMPLES = REPO_ROOT / "manifests" / "examples" / "mthreads"
MIXED_CONFIG = REPO_ROOT / "manifests" / "overlays" / "mixed" / "config.yaml"
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
MEM, CORE = "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core"


def probe_pod(name: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                                "resources": {"limits": {"mthreads.com/vgpu": "1"}}}]}})


@pytest.fixture(scope="module")
def webhook(kube_cluster, tmp_path_factory):
    """The real webhook (the mixed-fleet overlay's config) registered from manifests/."""
    server = WebhookProcess(tmp_path_factory.mktemp("e2e-webhook"), config=str(MIXED_CONFIG)).start()
    docs = webhook_configurations(server.url, server.ca)
    applied = kubectl(kube_cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert applied.returncode == 0, applied.stderr
    try:
        wait_until_called(kube_cluster, new_namespace(kube_cluster), probe_pod("probe"))
        yield server
    finally:
        # Fail-closed configurations must not outlive the webhook, or later tests' pods are refused.
        kubectl(kube_cluster, ADMIN, "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "mthreads-webhook", "--ignore-not-found")
        server.stop()


_NAMESPACES: list[str] = []  # made by this module's tests


@pytest.fixture(scope="module", autouse=True)
def delete_pods_afterwards(kube_cluster):
    """The pods these tests create are Pending for hami-scheduler: left behind (no controller
    finishes a namespace here), a later test's allocator would place them on its nodes."""
    yield
    for ns in _NAMESPACES:
        kubectl(kube_cluster, ADMIN, "delete", "pods", "--all", "-n", ns, "--grace-period=0",
                "--force", "--wait=false")
    _NAMESPACES.clear()


def new_namespace(cluster, grant_alice: bool = True) -> str:
    ns = f"e2e-{uuid.uuid4().hex[:8]}"
    assert kubectl(cluster, ADMIN, "create", "namespace", ns).returncode == 0
    _NAMESPACES.append(ns)
    if grant_alice:
        # Alice edits pods in her namespace like a tenant; the allocator may create them here too,
        # so that only the webhook's rules stand between either of them and a forged allocation.
        # (The built-in "edit" role is empty here: no controller-manager aggregates it.)
        kubectl(cluster, ADMIN, "create", "role", "pod-editor", "-n", ns, "--resource=pods",
                "--verb=create,get,list,watch,update,patch,delete")
        for user, name in ((ALICE, "alice"), (ALLOCATOR, "allocator")):
            kubectl(cluster, ADMIN, "create", "rolebinding", f"{name}-pods", "-n", ns,
                    "--role=pod-editor", f"--user={user}")
        wait_for(lambda: kubectl(cluster, ALICE, "auth", "can-i", "create", "pods", "-n", ns).returncode == 0,
                 10, 0.1, what=f"alice's role in {ns} taking effect")
    return ns


def get_pod(cluster, ns: str, name: str) -> dict:
    out = kubectl(cluster, ADMIN, "get", "pod", name, "-n", ns, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def limits(pod: dict, i: int = 0) -> dict:
    return pod["spec"]["containers"][i]["resources"]["limits"]


# (file, the to-allocate annotation, request-gpu-num, {container index: (memory, cores) after mutation})
VALID = [
    ("gpushare-pod-default.yaml", ",Mthreads,16384,8:;", None, {0: ("32", "8")}),
    ("exclusive-card.yaml", ",Mthreads,49152,16:;", None, {0: ("96", "16")}),
    ("two-whole-cards.yaml", ",Mthreads,49152,16:,Mthreads,49152,16:;", "2", {0: ("192", "32")}),
    ("s5000-64gib-slice.yaml", ",Mthreads,65536,8:;", None, {0: ("128", "8")}),
    ("two-slices-one-card.yaml", ",Mthreads,16384,4:;,Mthreads,16384,4:;", None,
     {0: ("32", "4"), 1: ("32", "4")}),
]


@pytest.mark.parametrize("file, encoded, gpu_num, resources", VALID)
def test_valid_example_is_stored_mutated(kube_cluster, webhook, file, encoded, gpu_num, resources):
    ns = new_namespace(kube_cluster)
    out = kubectl(kube_cluster, ALICE, "apply", "-n", ns, "-f", str(EXAMPLES / file))
    assert out.returncode == 0, out.stderr
    name = yaml.safe_load((EXAMPLES / file).read_text())["metadata"]["name"]
    pod = get_pod(kube_cluster, ns, name)
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    ann = pod["metadata"]["annotations"]
    assert ann[TO_ALLOCATE] == encoded
    assert ann.get("mthreads.com/request-gpu-num") == gpu_num
    for i, (mem, cores) in resources.items():
        assert (limits(pod, i)[MEM], limits(pod, i)[CORE]) == (mem, cores)
        assert pod["spec"]["containers"][i]["resources"]["requests"][MEM] == mem
    assert "nodeName" not in pod["spec"]  # Pending until the allocator binds it
    # applying it again is an UPDATE through the validating webhook, which leaves it as it was
    again = kubectl(kube_cluster, ALICE, "apply", "-n", ns, "-f", str(EXAMPLES / file))
    assert again.returncode == 0, again.stderr
    after = get_pod(kube_cluster, ns, name)
    assert after["spec"] == pod["spec"]
    assert after["metadata"]["annotations"][TO_ALLOCATE] == encoded


@pytest.mark.parametrize("file, words", [
    ("memory-3.yaml", ['container "main": mthreads.com/sgpu-memory=3 is not valid; valid values are '
                       '2, 4, 8, 16, 32, 64, 96, 128, 160 (memoryPerCard [96, 160])']),
    ("slice-over-two-cards.yaml", ["mthreads.com/vgpu=2", "sharing over several cards is not supported"]),
    ("memory-without-count.yaml", ["mthreads.com/sgpu-memory is set without mthreads.com/vgpu"]),
])
def test_invalid_example_fails_with_the_webhook_message(kube_cluster, webhook, file, words):
    ns = new_namespace(kube_cluster)
    out = kubectl(kube_cluster, ALICE, "apply", "-n", ns, "-f", str(EXAMPLES / "invalid" / file))
    assert out.returncode != 0
    assert "denied the request" in out.stderr
    for w in words:
        assert w in out.stderr, out.stderr
    assert kubectl(kube_cluster, ADMIN, "get", "pods", "-n", ns, "-o", "name").stdout == ""


def test_server_dry_run_goes_through_the_webhooks_and_stores_nothing(kube_cluster, webhook):
    ns = new_namespace(kube_cluster)
    file = str(EXAMPLES / "exclusive-card.yaml")
    out = kubectl(kube_cluster, ALICE, "apply", "--dry-run=server", "-n", ns, "-f", file, "-o", "json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["spec"]["schedulerName"] == "hami-scheduler" and limits(shown)[MEM] == "96"
    assert kubectl(kube_cluster, ADMIN, "get", "pods", "-n", ns, "-o", "name").stdout == ""
    bad = kubectl(kube_cluster, ALICE, "apply", "--dry-run=server", "-n", ns,
                  "-f", str(EXAMPLES / "invalid" / "memory-3.yaml"))
    assert bad.returncode != 0 and "mthreads.com/sgpu-memory=3 is not valid" in bad.stderr


def forged_pod(name: str, node: str | None = None) -> str:
    pod = yaml.safe_load((EXAMPLES / "gpushare-pod-default.yaml").read_text())
    pod["metadata"]["name"] = name
    pod["metadata"]["annotations"] = {"hami.io/mthreads-vgpu-devices-allocated":
                                      "node-1-mthreads-0,Mthreads,49152,16:;"}
    if node:
        pod["spec"]["nodeName"] = node
    return yaml.safe_dump(pod)


def test_forged_allocation_is_refused_for_a_user_and_accepted_for_the_allocator(kube_cluster, webhook):
    ns = new_namespace(kube_cluster)
    out = kubectl(kube_cluster, ALICE, "create", "-n", ns, "-f", "-", stdin=forged_pod("forged"))
    assert out.returncode != 0
    assert "hami.io/mthreads-vgpu-devices-allocated is written by the allocator" in out.stderr
    ok = kubectl(kube_cluster, ALLOCATOR, "create", "-n", ns, "-f", "-", stdin=forged_pod("by-allocator"))
    assert ok.returncode == 0, ok.stderr

    # UPDATE: alice may not add, change or remove one; the allocator may.
    plain = kubectl(kube_cluster, ALICE, "apply", "-n", ns, "-f", str(EXAMPLES / "gpushare-pod-default.yaml"))
    assert plain.returncode == 0, plain.stderr
    for args in (["hami.io/bind-phase=success"],
                 ["hami.io/mthreads-vgpu-devices-allocated=x,Mthreads,1,1:;", "--overwrite"]):
        add = kubectl(kube_cluster, ALICE, "annotate", "-n", ns, "pod/gpushare-pod-default", *args)
        assert add.returncode != 0 and "may only be changed by the allocator" in add.stderr, add.stderr
    remove = kubectl(kube_cluster, ALICE, "annotate", "-n", ns, "pod/by-allocator",
                     "hami.io/mthreads-vgpu-devices-allocated-")
    assert remove.returncode != 0 and "may only be changed by the allocator" in remove.stderr
    changed = kubectl(kube_cluster, ALLOCATOR, "annotate", "-n", ns, "pod/gpushare-pod-default",
                      "hami.io/bind-phase=allocating")
    assert changed.returncode == 0, changed.stderr
    # labels stay editable for everyone
    assert kubectl(kube_cluster, ALICE, "label", "-n", ns, "pod/gpushare-pod-default",
                   "team=ml").returncode == 0


def test_node_name_is_refused_for_a_user(kube_cluster, webhook):
    ns = new_namespace(kube_cluster)
    pod = yaml.safe_load((EXAMPLES / "gpushare-pod-default.yaml").read_text())
    pod["spec"]["nodeName"] = "node-1"
    out = kubectl(kube_cluster, ALICE, "create", "-n", ns, "-f", "-", stdin=yaml.safe_dump(pod))
    assert out.returncode != 0 and "spec.nodeName='node-1' is set" in out.stderr


def test_opted_out_namespace_is_not_sent_to_the_webhook(kube_cluster, webhook):
    ns = new_namespace(kube_cluster)
    assert kubectl(kube_cluster, ADMIN, "label", "namespace", ns, "hami.io/webhook=ignore").returncode == 0
    out = kubectl(kube_cluster, ALICE, "create", "-n", ns, "-f", "-", stdin=probe_pod("untouched"))
    assert out.returncode == 0, out.stderr
    assert get_pod(kube_cluster, ns, "untouched")["spec"]["schedulerName"] == "default-scheduler"


CERT_MANAGER_CRDS = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %(plural)s.cert-manager.io}
spec:
  group: cert-manager.io
  scope: Namespaced
  names: {kind: %(kind)s, plural: %(plural)s, singular: %(singular)s}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


@pytest.mark.parametrize("directory", ["manifests/base", "manifests/overlays/s4000",
                                       "manifests/overlays/s5000", "manifests/overlays/mixed",
                                       "manifests/cert-manager"])
def test_every_manifest_is_accepted_by_the_api_server(kube_cluster, webhook, directory):
    if directory == "manifests/cert-manager":
        # The schema-less stand-ins for cert-manager's CRDs only let the API server know the kinds;
        # what is checked is everything else in the overlay.
        crds = "---".join(CERT_MANAGER_CRDS % {"kind": k, "plural": k.lower() + "s", "singular": k.lower()}
                          for k in ("Issuer", "Certificate"))
        assert kubectl(kube_cluster, ADMIN, "apply", "-f", "-", stdin=crds).returncode == 0
        wait_for(lambda: kubectl(kube_cluster, ADMIN, "get", "issuers", "-A").returncode == 0, 30,
                 what="the Issuer CRD served")
    out = kubectl(kube_cluster, ADMIN, "apply", "-k", str(REPO_ROOT / directory), "--dry-run=server")
    assert out.returncode == 0, out.stderr
    assert "mutatingwebhookconfiguration.admissionregistration.k8s.io/mthreads-webhook" in out.stdout
    assert "deployment.apps/mthreads-webhook" in out.stdout
