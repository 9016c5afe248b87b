"""Pods with Dynamic Resource Allocation claims (webhook/scheduling/resource_claims.py): the
allocator's core refuses every node with a reason naming the claim; the extender's (binder=True,
kube-scheduler allocates the claims) does not refuse for them."""

import pytest

from tests.harness.schema import valid_at
from tests.scheduling.rules_support import cache_of, node, pod
from webhook.scheduling.feasible import node_checks

NODES = [node("n1"), node("n2")]


def claims_pod(*claims):
    p = pod("p", resourceClaims=list(claims))
    return {"apiVersion": "v1", "kind": "Pod", **p}


@pytest.mark.parametrize("entry, named", [
    ({"name": "gpu", "resourceClaimName": "my-claim"}, "my-claim"),
    ({"name": "gpu", "resourceClaimTemplateName": "my-template"}, "my-template"),
])
def test_a_pod_naming_a_claim_waits_on_every_node_with_the_claim_named(entry, named):
    p = valid_at(claims_pod(entry))
    reasons = cache_of(NODES).read(
        lambda state: {n: node_checks(p, state).reason(i, state) for n, i in state.nodes.items()})
    assert set(reasons) == {"n1", "n2"}
    for reason in reasons.values():
        assert reason is not None and repr(named) in reason and "mode=extender" in reason


def test_the_extender_does_not_refuse_a_pod_for_its_claims():
    p = valid_at(claims_pod({"name": "gpu", "resourceClaimName": "my-claim"}))
    reasons = cache_of(NODES).read(
        lambda state: [node_checks(p, state, binder=True).reason(i, state)
                       for i in state.nodes.values()])
    assert reasons == [None, None]


@pytest.mark.parametrize("claims", ["gpu", [1], [{"resourceClaimName": "c"}]])
def test_bad_claims_get_a_reason_naming_the_field(claims):
    p = pod("p", resourceClaims=claims)
    reasons = cache_of(NODES).read(
        lambda state: [node_checks(p, state).reason(i, state) for i in state.nodes.values()])
    assert all(r is not None and "spec.resourceClaims" in r for r in reasons)


def test_a_pod_without_claims_is_not_refused():
    reasons = cache_of(NODES).read(
        lambda state: [node_checks(pod("p"), state).reason(i, state) for i in state.nodes.values()])
    assert reasons == [None, None]
