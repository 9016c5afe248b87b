"""Issue 17's ways past the rules, tried on the real API server (1.20.2) through the webhook
registered from manifests/: a normal user's fake mirror pod, the opt-out label on an Mthreads
pod, a privileged ephemeral container (the harness turns 1.20's EphemeralContainers feature
gate on, so pods/ephemeralcontainers takes an EphemeralContainers object, as 1.16-1.21 do)."""

from __future__ import annotations

import pytest

from tests.builders import ALLOCATED
from tests.hardening.test_forged_allocations import (
    DENIED_CREATE,
    IGNORE,
    Api,
    a_pod,
    new_namespace,  # noqa: F401 (a fixture)
    webhook,  # noqa: F401 (a fixture)
)
from tests.harness.kube import ALICE, ALLOCATOR

pytestmark = pytest.mark.cluster
MIRROR = {"kubernetes.io/config.mirror": "0123456789abcdef"}


@pytest.fixture(scope="module")
def ns(kube_cluster, webhook):  # noqa: F811 (the fixture imported above)
    return new_namespace(kube_cluster, webhook.namespaces, extra_resources="pods/ephemeralcontainers")


@pytest.fixture(scope="module")
def alice(kube_cluster):
    return Api(kube_cluster, ALICE)


def refused(resp, *words: str) -> str:
    assert resp.status_code == 403, (resp.status_code, resp.text)
    message = resp.json()["message"]
    assert "admission webhook" in message, message
    for w in words:
        assert w in message, message
    return message


def test_a_normal_users_fake_mirror_pod_is_refused(alice, ns):
    """The review's pod: the mirror annotation, a node, a forged allocation, a privileged
    container and sgpu-memory 3. The annotation exempts nothing: each rule holds."""
    fake = a_pod("fake-mirror", annotations={**MIRROR, **ALLOCATED}, node="node-1")
    fake["spec"]["containers"][0]["resources"]["limits"]["mthreads.com/sgpu-memory"] = "3"
    fake["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refused(alice.create(ns, fake), DENIED_CREATE)
    fake["metadata"]["annotations"] = dict(MIRROR)
    refused(alice.create(ns, fake), "mthreads.com/sgpu-memory=3 is not valid")
    fake["spec"]["containers"][0]["resources"]["limits"]["mthreads.com/sgpu-memory"] = "32"
    refused(alice.create(ns, fake), "privileged: true")
    del fake["spec"]["containers"][0]["securityContext"]
    refused(alice.create(ns, fake), "spec.nodeName='node-1' is set")


def test_the_opt_out_label_on_an_mthreads_pod_is_refused(alice, ns):
    """Not sent to /mutate (objectSelector), but the opted-out entry still calls /validate."""
    labelled = a_pod("opted-out")
    labelled["metadata"]["labels"] = dict(IGNORE)
    refused(alice.create(ns, labelled), "label hami.io/webhook=ignore")
    plain = a_pod("opted-out-plain", mthreads=False)
    plain["metadata"]["labels"] = dict(IGNORE)
    assert alice.create(ns, plain).status_code == 201


def _add_ephemeral(api: Api, ns: str, name: str, container: dict):
    url = api.pod_url(ns, name, "ephemeralcontainers")
    current = api.session.get(url, timeout=30)
    assert current.status_code == 200, current.text
    body = current.json()
    assert body["kind"] == "EphemeralContainers"  # 1.20's shape
    body["ephemeralContainers"] = (body.get("ephemeralContainers") or []) + [container]
    return api.session.put(url, json=body, timeout=30)


def debug(name: str, **security) -> dict:
    c = {"name": name, "image": "busybox:1.36", "command": ["sh"], "stdin": True, "tty": True}
    if security:
        c["securityContext"] = security
    return c


def _validated(server) -> float:
    """How many reviews /validate has answered "allowed" (the webhook's own counter)."""
    text = server.session.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith('mthreads_webhook_requests_total{endpoint="validate",result="allowed"'))


def test_ephemeral_containers_are_reviewed_and_1_20_refuses_their_privilege_itself(
        alice, ns, webhook):  # noqa: F811
    """On 1.20 the API server's own validation refuses any securityContext on an ephemeral
    container (422, before the validating webhooks), so the webhook's rule 8 for them is
    reached from 1.23 on: it is tested at the HTTP level (tests/server/test_serve.py and
    tests/admission/test_guards.py, both shapes). Here: the subresource is registered and
    reviewed, and a plain debug container of an Mthreads pod stays allowed."""
    assert alice.create(ns, a_pod("gpu-debugged")).status_code == 201
    resp = _add_ephemeral(alice, ns, "gpu-debugged", debug("debug", privileged=True))
    assert resp.status_code == 422, resp.text
    assert "cannot be set for an Ephemeral Container" in resp.text
    before = _validated(webhook)
    resp = _add_ephemeral(alice, ns, "gpu-debugged", debug("plain-debug"))
    assert resp.status_code == 200, resp.text
    assert _validated(webhook) >= before + 1, "pods/ephemeralcontainers was not sent to /validate"


def test_to_allocate_and_card_model_are_held_after_create(alice, ns, kube_cluster):
    assert alice.create(ns, a_pod("held")).status_code == 201
    for key, value in (("hami.io/mthreads-vgpu-devices-to-allocate", ",Mthreads,49152,16:;"),
                       ("mthreads.com/card-model", "MTT-S4000")):
        resp = alice.patch(ns, "held", {"metadata": {"annotations": {key: value}}}, "merge")
        refused(resp, f"annotation {key} is set when the pod is created")
    resp = Api(kube_cluster, ALLOCATOR).patch(ns, "held", {"metadata": {"annotations": {
        "mthreads.com/card-model": "MTT-S4000"}}}, "merge")
    assert resp.status_code == 200, resp.text


def test_a_policy_the_allocator_does_not_implement_is_refused(alice, ns):
    resp = alice.create(ns, a_pod("policy", annotations={"hami.io/gpu-scheduler-policy": "topology"}))
    refused(resp, "valid values are binpack, spread")
    resp = alice.create(ns, a_pod("cards", annotations={"mthreads.ai/use-gpuuuid": "GPU-0"}))
    refused(resp, "<node>-mthreads-<index>")
