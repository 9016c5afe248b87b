"""The extender honours the node's card annotations as the allocator does: a cordoned card
takes nothing new (CardCordoned), a card holds at most its limit of containers
(CardTimeSlicingExhausted); the filter's reservations count towards the limit too."""

from __future__ import annotations

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import args, bind_args, pending

CORDON, LIMIT = "hami.io/device-cordon", "mthreads.com/max-instances-per-card"


def test_a_cordoned_card_is_never_chosen_and_a_node_with_all_cordoned_fails(setup):
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2, annotations={CORDON: "s4-mthreads-0"}))
    p = pending(api, pod(slice_(8, 2)))
    assert client.post("/filter", json=args(p, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(p, "s4")).get_json() == {"Error": ""}
    (written,) = api.bindings()
    assert written.body["metadata"]["annotations"]["mthreads.com/gpu-index"] == "1"
    q = pending(api, pod(whole(1, 96)))  # card 1 is busy now, card 0 cordoned
    body = client.post("/filter", json=args(q, ["s4"])).get_json()
    assert body["FailedNodes"] == {"s4": "ExclusiveDeviceAllocateConflict"}
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2, annotations={
        CORDON: "s4-mthreads-0,s4-mthreads-1"}))
    small = pending(api, pod(slice_(2)))
    body = client.post("/filter", json=args(small, ["s4"])).get_json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {"s4": "CardCordoned"}
    cache.apply("node", "MODIFIED", mt_node("s4", cards=2))  # uncordoned
    assert client.post("/filter", json=args(q, ["s4"])).get_json()["NodeNames"] == ["s4"]


def test_the_limit_of_containers_counts_reservations(setup):
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", cards=1, annotations={LIMIT: "2"}))
    first = pending(api, pod(slice_(2)))
    assert client.post("/filter", json=args(first, ["s4"])).get_json()["NodeNames"] == ["s4"]
    two = pending(api, pod(slice_(2), slice_(2)))  # 1 reserved + 2 > 2
    body = client.post("/filter", json=args(two, ["s4"])).get_json()
    assert body["FailedNodes"] == {"s4": "CardTimeSlicingExhausted"}
    one = pending(api, pod(slice_(2)))
    assert client.post("/filter", json=args(one, ["s4"])).get_json()["NodeNames"] == ["s4"]
    third = pending(api, pod(slice_(2)))
    body = client.post("/filter", json=args(third, ["s4"])).get_json()
    assert body["FailedNodes"] == {"s4": "CardTimeSlicingExhausted"}
