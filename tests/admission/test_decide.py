"""decode -> decide for the review shapes the API server sends: a pod, its pods/status, a
pods/binding or legacy `bindings` CREATE (shapes seen on kube-apiserver 1.20; see
tests/hardening/test_forged_allocations.py for the same on the real server)."""

import copy
import json

import pytest

from tests.builders import ALLOCATED, binding, binding_review, pod, review, status_review
from tests.builders import container as c
from webhook.admission import review as rv
from webhook.admission.decide import decide
from webhook.admission.validate import Rules
from webhook.model.annotations import ALLOCATION_KEYS
from webhook.model.config import AllocatorConfig, Config

ALLOCATOR = "system:serviceaccount:kube-system:mthreads-allocator"
KUBELET = "system:node:node-1"
PLUGIN = "mthreads-device-plugin"  # an extra writer, as a device plugin updating bind-phase
KEYS = sorted(ALLOCATION_KEYS)
RULES = Rules.of(Config(allocator=AllocatorConfig(extra_writers=(PLUGIN,))))
PLAIN = pod(c("train", 1, 32, 8), name="train")
BOUND = pod(c("train", 1, 32, 8), node="node-1", name="train", annotations=ALLOCATED)


def outcome(body: dict, mutating: bool = False):
    return decide(rv.decode(json.dumps(body).encode()), RULES, mutating)


def edited(p: dict, annotations: dict | None = None, labels: dict | None = None,
           status: dict | None = None) -> dict:
    """A copy of p with annotations set (removed where None), labels and status."""
    p = copy.deepcopy(p)
    ann = {**p["metadata"].get("annotations", {}), **(annotations or {})}
    p["metadata"]["annotations"] = {k: v for k, v in ann.items() if v is not None}
    if labels:
        p["metadata"]["labels"] = labels
    if status:
        p["status"] = status
    return p


PLAIN_BOUND = pod(c("web"), node="node-1", name="web")
RUNNING = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def test_decode_reads_the_subresource_and_kind():
    r = rv.decode(json.dumps(status_review(BOUND, BOUND)).encode())
    assert (r.is_pod, r.is_binding, r.sub_resource) == (True, False, "status")
    r = rv.decode(json.dumps(binding_review(binding())).encode())
    assert (r.is_pod, r.is_binding, r.sub_resource) == (False, True, "binding")
    r = rv.decode(json.dumps(binding_review(binding(), legacy=True)).encode())
    assert (r.is_pod, r.is_binding, r.sub_resource) == (False, True, "")
    r = rv.decode(json.dumps(review(PLAIN)).encode())
    assert (r.is_pod, r.is_binding, r.sub_resource) == (True, False, "")
    body = review(PLAIN)
    body["request"]["subResource"] = ["status"]  # not a string: treated as none
    assert rv.decode(json.dumps(body).encode()).sub_resource == ""


# -- pods/status: the same rule 10 as an UPDATE of the pod --------------------------------------

STATUS_CASES = []
for key in KEYS:
    STATUS_CASES += [
        (f"change {key}", BOUND, edited(BOUND, {key: "x"}, status=RUNNING)),
        (f"add {key}", PLAIN, edited(PLAIN, {key: ALLOCATED[key]})),
        (f"remove {key}", BOUND, edited(BOUND, {key: None}, status=RUNNING)),
    ]


@pytest.mark.parametrize("what, old, new", STATUS_CASES, ids=[w for w, _, _ in STATUS_CASES])
@pytest.mark.parametrize("user", ["alice", KUBELET, "system:kube-scheduler"])
def test_status_update_may_not_touch_allocation_keys(what, old, new, user):
    out = outcome(status_review(old, new, user=user))
    assert (out.result, out.rule) == ("denied", 10)
    message = out.response["response"]["status"]["message"]
    assert "may only be changed by the allocator" in message and user in message


@pytest.mark.parametrize("what, old, new", STATUS_CASES, ids=[w for w, _, _ in STATUS_CASES])
@pytest.mark.parametrize("user", [ALLOCATOR, PLUGIN])
def test_writers_may_touch_them_through_status(what, old, new, user):
    assert outcome(status_review(old, new, user=user)).result == "allowed"


@pytest.mark.parametrize("old, new", [
    (BOUND, edited(BOUND, status=RUNNING)),  # a kubelet's report: annotations unchanged
    (PLAIN, edited(PLAIN, status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})),
    (BOUND, edited(BOUND, {"example.com/note": "x"}, labels={"team": "ml"})),  # other metadata is free
    (PLAIN_BOUND, edited(PLAIN_BOUND, labels={"hami.io/webhook": "ignore"})),  # not Mthreads
    (edited(BOUND, {"kubernetes.io/config.mirror": "abc"}),  # mirror pods, as on UPDATE
     edited(BOUND, {"kubernetes.io/config.mirror": "abc", "hami.io/bind-phase": "x"})),
], ids=["kubelet-report", "unschedulable", "other-metadata", "opt-out-label", "mirror"])
def test_other_status_updates_are_allowed(old, new):
    out = outcome(status_review(old, new))
    assert out.result == "allowed" and "patch" not in out.response["response"]


# -- pods/binding and bindings ------------------------------------------------------------------

@pytest.mark.parametrize("legacy", [False, True], ids=["pods-binding", "bindings"])
@pytest.mark.parametrize("mutating", [False, True], ids=["validate", "mutate"])
@pytest.mark.parametrize("key", KEYS)
def test_a_binding_with_an_allocation_key_is_denied(key, mutating, legacy):
    out = outcome(binding_review(binding("train", {key: ALLOCATED[key]}), legacy=legacy), mutating)
    assert (out.result, out.rule) == ("denied", 10)
    assert out.response["response"]["status"]["message"] == (
        f"annotation {key} may only be written by the allocator ({ALLOCATOR}); "
        f"alice may not bind pod 'train' with it")


@pytest.mark.parametrize("legacy", [False, True], ids=["pods-binding", "bindings"])
@pytest.mark.parametrize("user, annotations", [
    (ALLOCATOR, ALLOCATED),  # the allocator's (and the extender's) one write
    (PLUGIN, {"hami.io/bind-phase": "allocating"}),
    ("system:kube-scheduler", None),  # default-scheduler binding a plain pod
    ("system:kube-scheduler", {"example.com/note": "x"}),
    ("alice", {}),
])
def test_other_bindings_are_allowed(user, annotations, legacy):
    out = outcome(binding_review(binding("train", annotations), user=user, legacy=legacy), True)
    assert out.result == "allowed" and "patch" not in out.response["response"]


@pytest.mark.parametrize("obj", [
    {"kind": "Binding"},
    {"kind": "Binding", "metadata": "x"},
    {"kind": "Binding", "metadata": {"annotations": ["hami.io/bind-phase"]}},
    {"kind": "Binding", "metadata": {"annotations": 7}},
    {"kind": "Binding", "metadata": {"name": 7, "annotations": {"x": None}}},
])
def test_malformed_bindings_are_allowed_not_errors(obj):
    assert outcome(binding_review(obj)).result == "allowed"


def test_other_kinds_and_operations_are_allowed_as_before():
    forged = binding("train", ALLOCATED)
    assert outcome(review(forged, kind="Binding", sub_resource="binding", operation="DELETE")
                   ).result == "allowed"
    other_group = binding_review(forged)
    other_group["request"]["kind"]["group"] = "example.com"
    assert outcome(other_group).result == "allowed"
    # a pod's eviction is not a write of its annotations
    eviction = review({"kind": "Eviction", "metadata": {"name": "train", "annotations": ALLOCATED}},
                      kind="Eviction", sub_resource="eviction", resource="pods")
    eviction["request"]["kind"]["group"] = "policy"
    assert outcome(eviction).result == "allowed"
