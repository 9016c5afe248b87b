"""The `preempt` verb: which card holders to evict so that a higher-priority pod fits.

The cache is fed by hand with bound pods (their allocation annotations and priorities), and
the messages are shaped as kube-scheduler 1.20 sends them with nodeCacheCapable: victims as
`NodeNameToMetaVictims` (pod UIDs)."""

from __future__ import annotations

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import pending
from tests.harness.invariants import ALLOCATED

FULL = 96 * 512


def holder(cache, node, card, units, priority, cores=4, terminating=False, name=None):
    """A pod bound on `node` holding `units` of card `card`."""
    p = pod(slice_(units, cores), node=node, name=name, spec={"priority": priority},
            annotations={ALLOCATED: f"{node}-mthreads-{card},Mthreads,{units * 512},{cores}:;"})
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.apply("pod", "ADDED", p)
    return p["metadata"]["uid"]


def preempt(client, api, p, proposed):
    """The answer for `p`, which waits on the API server (the verb reads it there)."""
    pending(api, p)
    body = {"Pod": p, "NodeNameToVictims": None, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
        for node, uids in proposed.items()}}
    r = client.post("/preempt", json=body)
    assert r.status_code == 200, r.get_json()
    return {node: [v["UID"] for v in mv["Pods"]]
            for node, mv in r.get_json()["NodeNameToMetaVictims"].items()}


def high(priority=1000, *containers):
    return pod(*(containers or (whole(1, 96),)), spec={"priority": priority})


def test_evicts_the_lower_priority_holders_of_one_card(setup):
    client, cache, api = setup
    low = [holder(cache, "s4", 0, 48, 0), holder(cache, "s4", 0, 48, 0)]
    other = holder(cache, "s4", 1, 96, 0)  # two on card 0, one on card 1: card 1 costs fewer
    got = preempt(client, api, high(), {"s4": []})
    assert got == {"s4": [other]}
    assert set(low).isdisjoint(got["s4"])


def test_never_a_victim_of_equal_or_higher_priority(setup):
    client, cache, api = setup
    holder(cache, "s4", 0, 96, 1000)  # equal
    holder(cache, "s4", 1, 96, 2000)  # higher
    assert preempt(client, api, high(1000), {"s4": []}) == {}  # the node is dropped
    lower = holder(cache, "s5", 0, 160, 10)
    holder(cache, "s5", 1, 160, 5000)
    assert preempt(client, api, high(1000, whole(1, 160)), {"s4": [], "s5": []}) == {"s5": [lower]}


def test_keeps_the_victims_kube_scheduler_proposed(setup):
    client, cache, api = setup
    theirs = holder(cache, "s4", 0, 32, 0)  # kube-scheduler wants it gone for cpu, say
    holder(cache, "s4", 0, 64, 50)
    mine = holder(cache, "s4", 1, 96, 0)
    got = preempt(client, api, high(100, slice_(96, 4)), {"s4": [theirs]})
    # without `theirs` card 0 still holds 64 units: one more victim, the lowest priority
    assert got == {"s4": [theirs, mine]}


def test_a_proposed_victim_of_higher_priority_drops_the_node(setup):
    client, cache, api = setup
    top = holder(cache, "s4", 0, 96, 5000)
    assert preempt(client, api, high(1000), {"s4": [top]}) == {}


def test_the_fewest_victims_for_a_slice(setup):
    client, cache, api = setup
    small = [holder(cache, "s4", 0, 32, 0) for _ in range(3)]  # card 0 full with three
    big = holder(cache, "s4", 1, 96, 0)  # card 1 full with one
    assert preempt(client, api, high(10, slice_(64, 4)), {"s4": []}) == {"s4": [big]}
    assert small


def test_whole_cards_take_every_holder_of_the_cards(setup):
    client, cache, api = setup
    a = [holder(cache, "s4", 0, 32, 0) for _ in range(2)]
    b = [holder(cache, "s4", 1, 32, 0) for _ in range(2)]
    got = preempt(client, api, high(10, whole(2, 96)), {"s4": []})
    assert sorted(got["s4"]) == sorted(a + b)


def test_terminating_holders_count_as_leaving(setup):
    """A lower-priority pod already terminating frees its card without a new victim: the node
    is answered with no victims (kube-scheduler then nominates it and waits)."""
    client, cache, api = setup
    holder(cache, "s4", 0, 96, 0, terminating=True)
    holder(cache, "s4", 1, 96, 0)
    assert preempt(client, api, high(), {"s4": []}) == {"s4": []}


def test_no_set_frees_room(setup):
    client, cache, api = setup
    holder(cache, "s4", 0, 96, 0)
    holder(cache, "s4", 1, 96, 0)
    assert preempt(client, api, high(10, whole(1, 160)), {"s4": []}) == {}  # the wrong model anyway


def test_reserved_and_assumed_shares_are_never_victims(setup):
    client, cache, api = setup
    low = pending(api, pod(whole(2, 96), spec={"priority": 0}))
    assert client.post("/filter", json={"Pod": low, "NodeNames": ["s4"]}).get_json()["NodeNames"] == ["s4"]
    assert preempt(client, api, high(), {"s4": []}) == {}


def test_plain_pods_and_the_old_form(setup):
    client, cache, api = setup
    plain = pending(api, pod(spec={"priority": 10}))
    body = {"Pod": plain, "NodeNameToVictims": {"s4": {"Pods": [], "NumPDBViolations": 1}}}
    got = client.post("/preempt", json=body).get_json()
    assert got == {"NodeNameToMetaVictims": {"s4": {"Pods": [], "NumPDBViolations": 1}}}
    low = holder(cache, "s4", 0, 96, 0)
    full = {"metadata": {"uid": low, "name": "x", "namespace": "default"}}
    body = {"Pod": pending(api, high(10, slice_(96, 4))),
            "NodeNameToVictims": {"s4": {"Pods": [full], "NumPDBViolations": 0}}}
    got = client.post("/preempt", json=body).get_json()
    assert got == {"NodeNameToMetaVictims": {"s4": {"Pods": [{"UID": low}], "NumPDBViolations": 0}}}


@pytest.mark.parametrize("body", [
    "nope", {"Pod": None}, {"Pod": {"metadata": {}}, "NodeNameToMetaVictims": []},
    {"Pod": {"metadata": {}}, "NodeNameToMetaVictims": {"s4": {"Pods": [{"uid": ""}]}}},
])
def test_bad_preemption_bodies(setup, body):
    client, _, _ = setup
    r = client.post("/preempt", json=body)
    assert r.status_code == 400 and r.get_json()["Error"].startswith("bad request")


def test_victims_also_make_room_under_a_lowered_allocatable(setup):
    """Card 0 has room for the slice, but the device plugin reports one card's memory: the
    kubelet would refuse the pod until one holder's request leaves the node's sum."""
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2, units=96,
                                            allocatable={"mthreads.com/sgpu-memory": "96"}))
    low = {holder(cache, "s4", 0, 32, 0), holder(cache, "s4", 1, 32, 0)}  # 64 of the 96 held
    got = preempt(client, api, high(1000, slice_(64, 4)), {"s4": []})  # either card has 64 free
    assert len(got["s4"]) == 1 and set(got["s4"]) <= low


def test_victims_free_an_instance_of_a_card_at_its_limit(setup):
    """Both cards hold the node's limit of containers (memory-only slices, room to spare in
    memory): one low-priority holder frees an instance, and the one of a card that holds
    fewer containers of lower priority is chosen."""
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2, units=96,
                                            annotations={"mthreads.com/max-instances-per-card": "2"}))
    low = [holder(cache, "s4", 0, 2, 0, cores=0), holder(cache, "s4", 0, 2, 0, cores=0)]
    holder(cache, "s4", 1, 2, 50, cores=0)
    holder(cache, "s4", 1, 2, 50, cores=0)
    got = preempt(client, api, high(100, slice_(2)), {"s4": []})
    assert len(got["s4"]) == 1 and got["s4"][0] in low


def test_a_cordoned_card_is_not_made_room_on(setup):
    """Evicting the holders of a cordoned card frees nothing the pod may take."""
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2, units=96,
                                            annotations={"hami.io/device-cordon": "s4-mthreads-0"}))
    holder(cache, "s4", 0, 96, 0)
    other = holder(cache, "s4", 1, 96, 0)
    assert preempt(client, api, high(), {"s4": []}) == {"s4": [other]}
