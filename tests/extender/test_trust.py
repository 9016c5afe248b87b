"""What a call's body can make the extender do (issue 32): it names a pod, and only that. The
verbs answer for the pod as the API server holds it (the fake API's `pods`, or the cache's
watch of waiting pods), check the node's own rules at a bind, and reserve for real pods only.
"""

from __future__ import annotations

import copy

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import args, bind_args, pending
from tests.harness.invariants import ALLOCATED
from webhook.extender.cache import WAITING
from webhook.scheduling import reasons


def lie(p: dict, **changes) -> dict:
    """A body's copy of `p` that says something else of it."""
    forged = copy.deepcopy(p)
    for where, value in changes.items():
        if where == "containers":
            forged["spec"]["containers"] = value
        elif where == "annotations":
            forged["metadata"]["annotations"].update(value)
        else:
            forged["metadata"][where] = value
    return forged


def gets(api) -> list[str]:
    return [path for method, path, _ in api.calls if method == "GET"]


def test_a_filter_body_that_lies_about_a_real_pod_binds_the_real_pods_allocation(setup):
    """The review's case: a pod of one 2-unit slice, a body saying two whole cards."""
    client, cache, api = setup
    real = pending(api, pod(slice_(2)))
    forged = lie(real, containers=[whole(2, 96)],
                 annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    assert client.post("/filter", json=args(forged, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(forged, "s4")).get_json() == {"Error": ""}
    (_, _, body), = api.bindings()
    assert body["metadata"]["annotations"][ALLOCATED] == "s4-mthreads-0,Mthreads,1024,0:;"
    assert cache.core.card("s4-mthreads-1").idle


@pytest.mark.parametrize("verb", ["/filter", "/prioritize", "/preempt"])
def test_the_pod_is_answered_from_the_watch_without_a_read(setup, verb):
    client, cache, api = setup
    real = pod(slice_(96, 8))
    cache.apply(WAITING, "ADDED", real)
    forged = lie(real, containers=[slice_(160)])  # would fit the S5000 only
    body = {"Pod": forged, "NodeNames": ["s4", "s5"], "NodeNameToMetaVictims": {}}
    answer = client.post(verb, json=body).get_json()
    assert gets(api) == []
    if verb == "/filter":
        assert answer["NodeNames"] == ["s4"]  # the real pod's 96 units: the S4000's


@pytest.mark.parametrize("case", ["made-up uid", "no such pod", "another scheduler", "bound"])
def test_no_reservation_and_no_binding_for_what_is_not_a_pod_waiting_for_us(setup, case):
    client, cache, api = setup
    real = pod(whole(2, 96))
    if case == "another scheduler":
        real["spec"]["schedulerName"] = "default-scheduler"
    if case == "bound":
        real["spec"]["nodeName"] = "s5"
    if case != "no such pod":
        pending(api, real)
    named = lie(real, uid="made-up") if case == "made-up uid" else real
    filtered = client.post("/filter", json=args(named, ["s4"])).get_json()
    expected = {"made-up uid": "uid made-up is gone", "no such pod": "not found",
                "another scheduler": "waits for scheduler 'default-scheduler', not 'hami-scheduler'",
                "bound": "is already bound to s5"}[case]
    assert filtered["NodeNames"] is None and filtered["Error"].endswith(expected), filtered
    assert not cache.core.reservations() and cache.core.card("s4-mthreads-0").idle
    bound = client.post("/bind", json=bind_args(named, "s4")).get_json()
    assert bound["Error"].endswith(expected) and api.bindings() == []


def test_made_up_uids_cannot_hold_the_cards(setup):
    """Four filters for made-up pods held every card of a 4-card cluster for 30 s."""
    client, cache, api = setup
    for _ in range(4):
        ghost = pod(whole(1, 96))
        assert client.post("/filter", json=args(ghost, ["s4", "s5"])).get_json()["Error"]
    real = pending(api, pod(whole(2, 96)))
    assert client.post("/filter", json=args(real, ["s4"])).get_json()["NodeNames"] == ["s4"]


def test_one_reservation_per_pod(setup):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    for _ in range(3):
        assert client.post("/filter", json=args(p, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert cache.core.reservations() == [p["metadata"]["uid"]]
    assert sum(not cache.core.card(f"s4-mthreads-{i}").idle for i in (0, 1)) == 1


def test_a_deleted_pod_gives_its_reservation_back_at_once(setup):
    client, cache, api = setup
    p = pod(whole(2, 96))
    cache.apply(WAITING, "ADDED", p)
    assert client.post("/filter", json=args(p, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert not cache.core.card("s4-mthreads-0").idle
    cache.apply(WAITING, "DELETED", p)
    assert not cache.core.reservations() and cache.core.card("s4-mthreads-0").idle


@pytest.mark.parametrize("node, reason", [
    (mt_node("tainted", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}]),
     reasons.TAINTED),
    (mt_node("elsewhere", labels={"pool": "b"}), reasons.AFFINITY),
    (mt_node("cordoned", unschedulable=True), reasons.UNSCHEDULABLE),
    (mt_node("down", ready=False), reasons.NOT_READY),
])
@pytest.mark.parametrize("reserved", [False, True])
def test_a_bind_to_a_node_the_pod_may_not_use_is_refused(setup, node, reason, reserved):
    client, cache, api = setup
    cache.apply("node", "ADDED", node)
    p = pending(api, pod(slice_(8, 2), spec={"nodeSelector": {"pool": "a"}} if reason ==
                         reasons.AFFINITY else None))
    name = node["metadata"]["name"]
    if reserved:  # a filter offered that node (as no kube-scheduler would)
        assert client.post("/filter", json=args(p, [name])).get_json()["NodeNames"] == [name]
    answer = client.post("/bind", json=bind_args(p, name)).get_json()
    assert answer == {"Error": f"node {name}: {reason}"}
    assert api.bindings() == [] and not cache.core.reservations() and not cache.core.assumed()


@pytest.mark.parametrize("field, value", [
    ("PodNamespace", "../kube-system"), ("PodNamespace", "Upper"), ("PodName", "a/b"),
    ("PodName", "x" * 254), ("Node", "s4/../../nodes"),
])
def test_names_that_are_not_kubernetes_names_are_a_bad_request(setup, field, value):
    client, cache, api = setup
    body = {**bind_args(pending(api, pod(slice_(8, 2))), "s4"), field: value}
    r = client.post("/bind", json=body)
    assert r.status_code == 400 and "is not a" in r.get_json()["Error"]
    assert api.calls == []
