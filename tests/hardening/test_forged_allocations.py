"""Forged allocations on a real API server, through the webhook registered from manifests/.

A normal user (alice, who may create, update, patch and delete pods in her namespace) must not
be able to write any allocation annotation: not on CREATE, not by adding, changing or removing
one later, by kubectl or by any kind of patch through the API, not through pods/status, not
in a pods/binding or legacy `bindings` write even where RBAC lets her bind; nor create an
Mthreads pod with spec.nodeName set. The allocator may do all of it, and the subresource
review fails open (kubelets and schedulers are never blocked by an outage of it).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import requests
import yaml

from tests.builders import ALLOCATED
from tests.harness.kube import ADMIN, ALICE, ALLOCATOR, free_ports
from tests.harness.kubectl import kubectl
from tests.harness.registration import wait_until_called, webhook_configurations
from tests.harness.wait import wait_for
from tests.harness.webhook import WebhookProcess
from webhook.model.annotations import ALLOCATION_KEYS

pytestmark = pytest.mark.cluster

KEYS = sorted(ALLOCATION_KEYS)
DENIED_CREATE = "is written by the allocator when it binds the pod"
DENIED_UPDATE = "may only be changed by the allocator"
IGNORE = {"hami.io/webhook": "ignore"}


def a_pod(name: str, mthreads: bool = True, annotations: dict | None = None,
          node: str | None = None) -> dict:
    resources = {"limits": {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "32",
                            "mthreads.com/sgpu-core": "8"}} if mthreads else {}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}]}}
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    if node:
        pod["spec"]["nodeName"] = node
    return pod


class Api:
    """Plain HTTPS calls to the API server as one user (JSON, merge and strategic patches)."""

    def __init__(self, cluster, user: str):
        self.cluster = cluster
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.verify = str(cluster.ca_file)
        self.session.headers["Authorization"] = f"Bearer {cluster.token(user)}"

    def pod_url(self, ns: str, name: str = "", sub: str = "") -> str:
        return f"{self.cluster.url}/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "") + \
            (f"/{sub}" if sub else "")

    def get(self, ns: str, name: str) -> dict:
        resp = self.session.get(self.pod_url(ns, name), timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def create(self, ns: str, pod: dict) -> requests.Response:
        return self.session.post(self.pod_url(ns), json=pod, timeout=30)

    def patch(self, ns: str, name: str, body, kind: str = "json", sub: str = "") -> requests.Response:
        content_type = {"json": "application/json-patch+json", "merge": "application/merge-patch+json",
                        "strategic": "application/strategic-merge-patch+json"}[kind]
        return self.session.patch(self.pod_url(ns, name, sub), data=json.dumps(body), timeout=30,
                                  headers={"Content-Type": content_type})

    def put(self, ns: str, pod: dict) -> requests.Response:
        return self.session.put(self.pod_url(ns, pod["metadata"]["name"]), json=pod, timeout=30)


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@pytest.fixture(scope="module")
def webhook(kube_cluster, tmp_path_factory):
    """The webhook (default config) registered from manifests/, as in test_webhook_e2e."""
    server = WebhookProcess(tmp_path_factory.mktemp("forged-webhook")).start()
    docs = webhook_configurations(server.url, server.ca)
    applied = kubectl(kube_cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    namespaces: list[str] = []
    try:
        assert applied.returncode == 0, applied.stderr
        ns = new_namespace(kube_cluster, namespaces)
        wait_until_called(kube_cluster, ns, json.dumps(a_pod("probe", mthreads=True)))
        server.namespaces = namespaces
        yield server
    finally:
        # Fail-closed configurations must not outlive the webhook, or later tests' pods are refused.
        kubectl(kube_cluster, ADMIN, "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "mthreads-webhook", "--ignore-not-found")
        for ns in namespaces:  # no controller-manager: namespaces never finish terminating
            kubectl(kube_cluster, ADMIN, "delete", "pods", "--all", "-n", ns, "--grace-period=0",
                    "--force", "--wait=false")
        server.stop()


def new_namespace(cluster, made: list[str], extra_resources: str = "") -> str:
    """A namespace where alice and the allocator may create, update, patch and delete pods."""
    ns = f"forged-{uuid.uuid4().hex[:8]}"
    assert kubectl(cluster, ADMIN, "create", "namespace", ns).returncode == 0
    made.append(ns)
    resources = "pods" + (f",{extra_resources}" if extra_resources else "")
    out = kubectl(cluster, ADMIN, "create", "role", "pod-editor", "-n", ns, f"--resource={resources}",
                  "--verb=create,get,list,watch,update,patch,delete")
    assert out.returncode == 0, out.stderr
    for user, name in ((ALICE, "alice"), (ALLOCATOR, "allocator")):
        kubectl(cluster, ADMIN, "create", "rolebinding", f"{name}-pods", "-n", ns,
                "--role=pod-editor", f"--user={user}")
    wait_for(lambda: kubectl(cluster, ALICE, "auth", "can-i", "create", "pods", "-n", ns).returncode == 0,
             10, 0.1, what=f"alice's role in {ns} taking effect")
    return ns


@pytest.fixture(scope="module")
def ns(kube_cluster, webhook):
    return new_namespace(kube_cluster, webhook.namespaces)


@pytest.fixture(scope="module")
def api(kube_cluster):
    return {ALICE: Api(kube_cluster, ALICE), ALLOCATOR: Api(kube_cluster, ALLOCATOR)}


# -- CREATE ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mthreads", [True, False], ids=["mthreads-pod", "plain-pod"])
@pytest.mark.parametrize("key", KEYS)
def test_a_user_cannot_create_a_pod_with_an_allocation_annotation(kube_cluster, ns, key, mthreads):
    name = f"forged-{uuid.uuid4().hex[:6]}"
    out = kubectl(kube_cluster, ALICE, "create", "-n", ns, "-f", "-",
                  stdin=json.dumps(a_pod(name, mthreads, {key: ALLOCATED[key]})))
    assert out.returncode != 0, f"alice created a pod carrying {key}"
    assert DENIED_CREATE in out.stderr and key in out.stderr, out.stderr
    assert kubectl(kube_cluster, ADMIN, "get", "pod", name, "-n", ns).returncode != 0


def test_the_allocator_can_create_a_pod_with_every_allocation_annotation(api, ns):
    resp = api[ALLOCATOR].create(ns, a_pod("by-allocator", annotations=ALLOCATED))
    assert resp.status_code == 201, resp.text
    stored = api[ALLOCATOR].get(ns, "by-allocator")["metadata"]["annotations"]
    assert {k: stored[k] for k in KEYS} == ALLOCATED


def test_a_user_cannot_create_an_mthreads_pod_with_node_name(kube_cluster, api, ns):
    out = kubectl(kube_cluster, ALICE, "create", "-n", ns, "-f", "-",
                  stdin=json.dumps(a_pod("placed-by-alice", node="node-1")))
    assert out.returncode != 0 and "spec.nodeName='node-1' is set" in out.stderr, out.stderr
    resp = api[ALICE].create(ns, a_pod("placed-by-alice-api", node="node-1"))
    assert resp.status_code == 403 and "spec.nodeName" in resp.json()["message"], resp.text
    # rule 9 is for Mthreads pods only
    assert api[ALICE].create(ns, a_pod("plain-placed", mthreads=False, node="node-1")).status_code == 201
    # the allocator may create a pod already placed
    assert api[ALLOCATOR].create(ns, a_pod("placed-by-allocator", node="node-1")).status_code == 201


def test_a_user_cannot_set_node_name_on_an_existing_pod(api, ns):
    assert api[ALICE].create(ns, a_pod("unplaced")).status_code == 201
    resp = api[ALICE].patch(ns, "unplaced", [{"op": "add", "path": "/spec/nodeName", "value": "node-1"}])
    assert resp.status_code in (403, 422), resp.text  # the API server: spec is immutable
    assert "nodeName" not in api[ALICE].get(ns, "unplaced")["spec"]


# -- UPDATE ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def targets(api, ns):
    """A pod of alice's without allocation, and one the allocator made with all of them."""
    assert api[ALICE].create(ns, a_pod("plain")).status_code == 201
    assert api[ALLOCATOR].create(ns, a_pod("bound", annotations=ALLOCATED)).status_code == 201
    return "plain", "bound"


def _attempts(api, kube_cluster, ns, key, plain, bound):
    """(what, result) of every way alice might add, change or remove `key`."""
    a = api[ALICE]
    ann = f"/metadata/annotations/{escape(key)}"
    yield "kubectl annotate (add)", kubectl(kube_cluster, ALICE, "annotate", "-n", ns,
                                            f"pod/{plain}", f"{key}=x")
    yield "kubectl annotate --overwrite (change)", kubectl(
        kube_cluster, ALICE, "annotate", "--overwrite", "-n", ns, f"pod/{bound}", f"{key}=x")
    yield "kubectl annotate key- (remove)", kubectl(kube_cluster, ALICE, "annotate", "-n", ns,
                                                    f"pod/{bound}", f"{key}-")
    yield "JSON patch add", a.patch(ns, plain, [{"op": "add", "path": ann, "value": "x"}])
    yield "JSON patch replace", a.patch(ns, bound, [{"op": "replace", "path": ann, "value": "x"}])
    yield "JSON patch remove", a.patch(ns, bound, [{"op": "remove", "path": ann}])
    yield "JSON patch of all annotations", a.patch(ns, bound, [
        {"op": "replace", "path": "/metadata/annotations", "value": {"team": "ml"}}])
    yield "merge patch (change)", a.patch(ns, bound, {"metadata": {"annotations": {key: "x"}}}, "merge")
    yield "merge patch (remove)", a.patch(ns, bound, {"metadata": {"annotations": {key: None}}}, "merge")
    yield "strategic merge patch (add)", a.patch(ns, plain, {"metadata": {"annotations": {key: "x"}}},
                                                 "strategic")
    pod = a.get(ns, bound)
    pod["metadata"]["annotations"][key] = "x"
    yield "PUT (change)", a.put(ns, pod)
    pod = a.get(ns, plain)
    pod["metadata"].setdefault("annotations", {})[key] = ALLOCATED[key]
    yield "PUT (add)", a.put(ns, pod)


@pytest.mark.parametrize("key", KEYS)
def test_a_user_cannot_add_change_or_remove_an_allocation_annotation(kube_cluster, api, ns,
                                                                     targets, key):
    plain, bound = targets
    before = {name: api[ALLOCATOR].get(ns, name)["metadata"].get("annotations", {})
              for name in targets}
    allowed = []
    for what, result in _attempts(api, kube_cluster, ns, key, plain, bound):
        if isinstance(result, requests.Response):
            ok, message = result.status_code < 300, result.text
        else:
            ok, message = result.returncode == 0, result.stderr
        if ok or DENIED_UPDATE not in message:
            allowed.append(f"{what}: {message[:200]}")
    assert allowed == []
    after = {name: api[ALLOCATOR].get(ns, name)["metadata"].get("annotations", {}) for name in targets}
    assert after == before
    # labels stay editable
    assert api[ALICE].patch(ns, bound, {"metadata": {"labels": {"team": key.split("/")[-1]}}},
                            "merge").status_code == 200


def test_the_allocator_can_add_change_and_remove_them(kube_cluster, api, ns):
    assert api[ALICE].create(ns, a_pod("for-allocator")).status_code == 201
    al = api[ALLOCATOR]
    out = kubectl(kube_cluster, ALLOCATOR, "annotate", "-n", ns, "pod/for-allocator",
                  *(f"{k}={v}" for k, v in ALLOCATED.items()))
    assert out.returncode == 0, out.stderr
    phase = f"/metadata/annotations/{escape('hami.io/bind-phase')}"
    replace = al.patch(ns, "for-allocator", [{"op": "replace", "path": phase, "value": "success"}])
    assert replace.status_code == 200, replace.text
    remove = al.patch(ns, "for-allocator", [{"op": "remove", "path": phase}])
    assert remove.status_code == 200, remove.text
    stored = al.get(ns, "for-allocator")["metadata"]["annotations"]
    assert "hami.io/bind-phase" not in stored and stored["hami.io/vgpu-node"] == "node-1"


# -- subresources -------------------------------------------------------------------------------
# The API server takes a pods/status update's metadata, and merges a Binding's annotations into
# the pod (SPEC 4); `bindings` is the legacy path to the same write. All three are reviewed by
# validate-subresources.mthreads.hami.io (failurePolicy Ignore, no objectSelector).

DENIED_BINDING = "may only be written by the allocator"


@pytest.fixture(scope="module")
def status_ns(kube_cluster, webhook):
    """A namespace where alice may also write pods/status, pods/binding and bindings, as a
    tenant's controller or second scheduler might."""
    return new_namespace(kube_cluster, webhook.namespaces,
                         extra_resources="pods/status,pods/binding,bindings")


def a_binding(name: str, annotations: dict | None = None, labels: dict | None = None) -> dict:
    meta: dict = {"name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"kind": "Node", "name": "node-1"}}


def bind(api: Api, ns: str, name: str, binding: dict, legacy: bool = False) -> requests.Response:
    url = f"{api.cluster.url}/api/v1/namespaces/{ns}/bindings" if legacy else \
        api.pod_url(ns, name, "binding")
    return api.session.post(url, json=binding, timeout=30)


def test_a_user_without_binding_rights_cannot_bind_with_annotations(api, ns):
    assert api[ALICE].create(ns, a_pod("to-bind")).status_code == 201
    binding = a_binding("to-bind", ALLOCATED)
    resp = bind(api[ALICE], ns, "to-bind", binding)
    assert resp.status_code == 403, resp.text  # RBAC: pods/binding is the allocator's
    assert not set(KEYS) & set(api[ALICE].get(ns, "to-bind")["metadata"].get("annotations", {}))


@pytest.mark.parametrize("labels", [None, IGNORE], ids=["pod", "opted-out-pod"])
def test_pods_status_cannot_change_allocation_annotations(api, status_ns, labels):
    """pods/status is reviewed like an UPDATE of the pod, whatever the pod's labels."""
    ns, name = status_ns, f"bound-{uuid.uuid4().hex[:6]}"
    # An opted-out pod asks for no Mthreads resource: on one that does, the label is refused.
    pod = a_pod(name, mthreads=not labels, annotations=ALLOCATED)
    if labels:
        pod["metadata"]["labels"] = dict(labels)
    assert api[ALLOCATOR].create(ns, pod).status_code == 201
    key = "hami.io/mthreads-vgpu-devices-allocated"
    attempts = {
        "merge (change)": api[ALICE].patch(ns, name, {"metadata": {"annotations": {
            key: "node-1-mthreads-3,Mthreads,49152,16:;"}}}, "merge", sub="status"),
        "merge (remove)": api[ALICE].patch(ns, name, {"metadata": {"annotations": {
            "hami.io/bind-phase": None}}}, "merge", sub="status"),
        "JSON patch (replace all)": api[ALICE].patch(ns, name, [
            {"op": "replace", "path": "/metadata/annotations", "value": {"team": "ml"}}], sub="status"),
        # opting out on the way must not help: the old object's labels match as well
        "merge (change + opt out)": api[ALICE].patch(ns, name, {"metadata": {
            "labels": {"hami.io/webhook": "ignore"}, "annotations": {key: "x"}}}, "merge", sub="status"),
    }
    for what, resp in attempts.items():
        assert resp.status_code == 403 and DENIED_UPDATE in resp.text, f"{what}: {resp.text[:300]}"
    stored = api[ALICE].get(ns, name)["metadata"]["annotations"]
    assert {k: stored.get(k) for k in KEYS} == ALLOCATED
    # What a kubelet does through pods/status stays allowed: status, and unrelated metadata.
    report = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Test"}]},
              "metadata": {"annotations": {"example.com/note": "x"}}}
    resp = api[ALICE].patch(ns, name, report, "strategic", sub="status")
    assert resp.status_code == 200, resp.text
    # The allocator may write them through pods/status (the device plugin's bind-phase path).
    resp = api[ALLOCATOR].patch(ns, name, {"metadata": {"annotations": {
        "hami.io/bind-phase": "success"}}}, "merge", sub="status")
    assert resp.status_code == 200, resp.text
    assert api[ALICE].get(ns, name)["metadata"]["annotations"]["hami.io/bind-phase"] == "success"


@pytest.mark.parametrize("how", ["pods/binding", "bindings", "binding labelled ignore",
                                 "opted-out pod"])
def test_a_binding_cannot_carry_forged_allocation_annotations(api, status_ns, how):
    """A Binding with an allocation key is refused unless the allocator posts it, by either
    path, and labels (the Binding's or the pod's) do not switch the review off."""
    ns, name = status_ns, f"self-bound-{uuid.uuid4().hex[:6]}"
    pod = a_pod(name, mthreads=how != "opted-out pod")  # the label is refused on an Mthreads pod
    if how == "opted-out pod":
        pod["metadata"]["labels"] = dict(IGNORE)
    assert api[ALICE].create(ns, pod).status_code == 201
    binding = a_binding(name, ALLOCATED, labels=IGNORE if how == "binding labelled ignore" else None)
    resp = bind(api[ALICE], ns, name, binding, legacy=how == "bindings")
    assert resp.status_code == 403 and DENIED_BINDING in resp.text, resp.text
    assert f"alice may not bind pod '{name}'" in resp.json()["message"]
    stored = api[ALICE].get(ns, name)
    assert not set(KEYS) & set(stored["metadata"].get("annotations", {}))
    assert "nodeName" not in stored["spec"]


@pytest.mark.parametrize("legacy", [False, True], ids=["pods-binding", "bindings"])
def test_the_allocator_binds_with_annotations_and_others_bind_plain_pods(api, status_ns, legacy):
    ns, tag = status_ns, uuid.uuid4().hex[:6]
    # the allocator's (and the extender's) one write: node and every annotation at once
    assert api[ALICE].create(ns, a_pod(f"gpu-{tag}")).status_code == 201
    resp = bind(api[ALLOCATOR], ns, f"gpu-{tag}", a_binding(f"gpu-{tag}", ALLOCATED), legacy)
    assert resp.status_code == 201, resp.text
    stored = api[ALICE].get(ns, f"gpu-{tag}")
    assert stored["spec"]["nodeName"] == "node-1"
    assert {k: stored["metadata"]["annotations"][k] for k in KEYS} == ALLOCATED
    # a second scheduler binding a pod without allocation keys, as default-scheduler does
    assert api[ALICE].create(ns, a_pod(f"web-{tag}", mthreads=False)).status_code == 201
    resp = bind(api[ALICE], ns, f"web-{tag}", a_binding(f"web-{tag}", {"example.com/note": "x"}),
                legacy)
    assert resp.status_code == 201, resp.text
    assert api[ALICE].get(ns, f"web-{tag}")["spec"]["nodeName"] == "node-1"


def test_an_outage_of_the_subresource_review_blocks_no_status_update_or_binding(
        kube_cluster, api, status_ns, webhook):
    """failurePolicy Ignore (docs/deploy.md): with the webhook unreachable for pods/status and
    bindings, kubelets' status reports and bindings still go through. Last in this file: it
    points that one entry at a closed port, then back."""
    ns, tag = status_ns, uuid.uuid4().hex[:6]
    for name in (f"probe-{tag}", f"report-{tag}", f"gpu-{tag}"):
        assert api[ALICE].create(ns, a_pod(name)).status_code == 201
    hooks = json.loads(kubectl(kube_cluster, ADMIN, "get", "validatingwebhookconfiguration",
                               "mthreads-webhook", "-o", "json").stdout)["webhooks"]
    index = [h["name"] for h in hooks].index("validate-subresources.mthreads.hami.io")
    url = hooks[index]["clientConfig"]["url"]
    dead = f"https://127.0.0.1:{free_ports(1)[0]}/validate"

    def point_at(target: str) -> None:
        out = kubectl(kube_cluster, ADMIN, "patch", "validatingwebhookconfiguration",
                      "mthreads-webhook", "--type=json", "-p", json.dumps(
                          [{"op": "replace", "path": f"/webhooks/{index}/clientConfig/url",
                            "value": target}]))
        assert out.returncode == 0, out.stderr

    def forged_status_goes_through() -> bool:
        resp = api[ALICE].patch(ns, f"probe-{tag}", {"metadata": {"annotations": {
            "hami.io/bind-phase": uuid.uuid4().hex}}}, "merge", sub="status")
        assert resp.status_code in (200, 403), resp.text
        return resp.status_code == 200

    point_at(dead)
    try:
        # the API server picks the change up in a moment
        wait_for(forged_status_goes_through, 30, 0.3, what="the dead endpoint used")
        started = time.monotonic()
        report = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Test"}]}}
        resp = api[ALICE].patch(ns, f"report-{tag}", report, "strategic", sub="status")
        assert resp.status_code == 200, resp.text
        resp = bind(api[ALLOCATOR], ns, f"gpu-{tag}", a_binding(f"gpu-{tag}", ALLOCATED))
        assert resp.status_code == 201, resp.text
        assert time.monotonic() - started < 5  # a refused connection costs no timeout
    finally:
        point_at(url)
    # reviewed again before the next test
    wait_for(lambda: not forged_status_goes_through(), 30, 0.3, what="the webhook used again")
