"""Reservations: the filter chooses the node and cards and holds them for the bind, so a pod
filtered before an earlier pod's bind arrives never loses the race (docs/extender.md)."""

from __future__ import annotations

import json

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import add_busy_node, args, bind_args, pending
from tests.harness.invariants import ALLOCATED, S4000_MIB, parse_allocated
from webhook.extender.cache import IN_DOUBT, RESERVE_FOR


def filtered(client, p, names=("s4", "s5")):
    return client.post("/filter", json=args(p, names)).get_json()


def bound_copy(p, node, allocated):
    b = json.loads(json.dumps(p))
    b["spec"]["nodeName"] = node
    b["metadata"]["annotations"][ALLOCATED] = allocated
    return b


def test_filter_answers_one_node_and_reserves_its_cards(setup):
    client, cache, api = setup
    add_busy_node(client, cache, api, busy="s4b")
    p = pending(api, pod(slice_(96, 4)))
    body = filtered(client, p, ["s4", "s4b", "s5"])
    # binpack (default): the busier S4000 node; s4 fits too, s5 does not: no reasons given
    assert body == {"NodeNames": ["s4b"], "FailedNodes": {}, "Error": ""}
    uid = p["metadata"]["uid"]
    assert cache.core.share(uid).node == "s4b" and uid in cache.core.reservations()
    assert client.post("/bind", json=bind_args(p, "s4b")).get_json() == {"Error": ""}
    _, (_, _, second) = api.bindings()
    assert second["target"]["name"] == "s4b" and uid not in cache.core.reservations()
    # card spread (default): the idle card of the node
    assert second["metadata"]["annotations"][ALLOCATED] == "s4b-mthreads-1,Mthreads,49152,4:;"


def test_bind_writes_the_cards_the_filter_reserved(setup):
    """The card the filter chose is the one written, even if the state changed since."""
    client, cache, api = setup
    p = pending(api, pod(slice_(32, 4)))
    assert filtered(client, p, ["s4"])["NodeNames"] == ["s4"]
    card = cache.core.share(p["metadata"]["uid"]).cards[0].card
    assert client.post("/bind", json=bind_args(p, "s4")).get_json() == {"Error": ""}
    ann = api.bindings()[-1].body["metadata"]["annotations"]
    assert ann[ALLOCATED] == f"{card},Mthreads,16384,4:;"


def test_bind_on_another_node_releases_and_decides_there(setup):
    client, cache, api = setup
    cache.apply("node", "ADDED", mt_node("s4b", cards=1, units=96))
    p = pending(api, pod(whole(1, 96)))
    assert filtered(client, p, ["s4", "s4b"])["NodeNames"] == ["s4"]  # idle both: by name
    uid = p["metadata"]["uid"]
    assert client.post("/bind", json=bind_args(p, "s4b")).get_json() == {"Error": ""}
    assert api.bindings()[-1].body["target"]["name"] == "s4b"
    assert cache.core.card("s4-mthreads-0").idle and cache.core.share(uid).node == "s4b"


def test_a_new_filter_of_the_pod_replaces_its_reservation(setup):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    assert filtered(client, p, ["s4"])["NodeNames"] == ["s4"]
    assert filtered(client, p, ["s4"])["NodeNames"] == ["s4"]  # its own reservation does not block it
    held = [c for c in ("s4-mthreads-0", "s4-mthreads-1") if not cache.core.card(c).idle]
    assert len(held) == 1 and len(cache.core.reservations()) == 1


def test_an_abandoned_reservation_lapses(setup):
    """kube-scheduler may drop the pod after the filter (a later plugin refused it): the
    reservation is released when its time is up, and a later bind decides afresh."""
    client, cache, api = setup
    a, b = pending(api, pod(whole(2, 96))), pending(api, pod(whole(1, 96)))
    assert filtered(client, a, ["s4"])["NodeNames"] == ["s4"]
    assert filtered(client, b, ["s4"])["FailedNodes"] == {"s4": "ExclusiveDeviceAllocateConflict"}
    now = min(cache.core.reservation(uid).until for uid in cache.core.reservations())
    assert cache.core.expire(now - 1) == 0
    assert cache.core.expire(now) == 1 and not cache.core.reservations() and not cache.core.assumed()
    assert cache.core.card("s4-mthreads-0").idle and cache.core.card("s4-mthreads-1").idle
    assert filtered(client, b, ["s4"])["NodeNames"] == ["s4"]
    assert 5 <= RESERVE_FOR <= 60
    # the late bind of a: no reservation, decided on the state: b's reservation holds a card
    assert client.post("/bind", json=bind_args(a, "s4")).get_json()["Error"] == \
        "node s4: ExclusiveDeviceAllocateConflict"


def test_reservations_lapse_in_the_order_they_were_made(setup, monkeypatch):
    """expire reads the reservations from the oldest and stops at the first still held; a new
    filter of a pod makes its reservation the newest."""
    import webhook.extender.verbs as verbs_module
    client, cache, api = setup
    clock = [1000.0]
    monkeypatch.setattr(verbs_module.time, "monotonic", lambda: clock[0])
    pods = [pending(api, pod(slice_(8, 1))) for _ in range(3)]
    for p in pods:
        assert filtered(client, p, ["s5"])["NodeNames"] == ["s5"]
        clock[0] += 1
    assert filtered(client, pods[0], ["s5"])["NodeNames"] == ["s5"]  # refiltered at 1003
    uids = [p["metadata"]["uid"] for p in pods]
    assert cache.core.reservations() == [uids[1], uids[2], uids[0]]
    assert cache.core.expire(1001 + RESERVE_FOR - 0.5) == 0  # p0's first lapse time is past: refiltered
    assert cache.core.expire(1001 + RESERVE_FOR) == 1 and cache.core.reservations() == uids[2:] + uids[:1]
    assert cache.core.expire(1002 + RESERVE_FOR) == 1 and cache.core.reservations() == uids[:1]
    assert cache.core.expire(1003 + RESERVE_FOR) == 1 and not cache.core.reservations() and not cache.core.assumed()


def test_reservation_ends_when_the_pod_is_seen_bound_and_lapses_when_deleted(setup):
    client, cache, api = setup
    a = pending(api, pod(slice_(32, 4)))
    b = pending(api, pod(slice_(32, 4)))
    assert filtered(client, a, ["s4"])["NodeNames"] == ["s4"]
    assert filtered(client, b, ["s4"])["NodeNames"] == ["s4"]
    # a is bound elsewhere (another scheduler): its real share replaces the reservation
    elsewhere = bound_copy(a, "s4", "s4-mthreads-1,Mthreads,8192,2:;")
    api.pods[("default", a["metadata"]["name"])] = elsewhere
    cache.apply("pod", "MODIFIED", elsewhere)
    assert cache.core.share(a["metadata"]["uid"]).cards[0].memory_mib == 8192
    assert cache.core.expire(float("inf")) == 1  # only b's is left to lapse
    assert cache.core.card("s4-mthreads-1").memory_mib == 8192
    # b is deleted while reserved: the watch of bound pods does not show it; the
    # reservation holds its share until its time is up
    assert filtered(client, b, ["s4"])["NodeNames"] == ["s4"]
    del api.pods[("default", b["metadata"]["name"])]
    assert cache.core.share(b["metadata"]["uid"]) is not None
    assert cache.core.expire(float("inf")) == 1 and not cache.core.reservations()
    assert cache.core.share(b["metadata"]["uid"]) is None
    assert client.post("/bind", json=bind_args(a, "s4")).get_json()["Error"].endswith("already bound to s4")


def test_a_relist_keeps_the_reservations_of_the_pods_it_does_not_show(setup):
    """The list of bound pods does not show a pending pod: its reservation holds."""
    client, cache, api = setup
    a = pending(api, pod(whole(1, 96)))
    assert filtered(client, a, ["s4"])["NodeNames"] == ["s4"]
    cache.apply("pod", "RESET", [])
    assert not cache.core.card("s4-mthreads-0").idle and not cache.core.uncertain()
    assert client.post("/bind", json=bind_args(a, "s4")).get_json() == {"Error": ""}


@pytest.mark.parametrize("since", ["deleted", "bound"])
def test_a_pod_bound_by_us_that_a_relist_does_not_show_is_read_again(setup, since):
    """Bound by us, not yet seen by the watch, and then a relist without it: its binding may be
    newer than the list (keep counting) or the pod gone since (forget it); a read tells."""
    client, cache, api = setup
    a = pending(api, pod(whole(1, 96)))
    uid, key = a["metadata"]["uid"], ("default", a["metadata"]["name"])
    assert filtered(client, a, ["s4"])["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(a, "s4")).get_json() == {"Error": ""}
    cache.apply("pod", "RESET", [])
    assert not cache.core.card("s4-mthreads-0").idle
    assert cache.core.uncertain() == [(uid, *key)]
    if since == "deleted":
        del api.pods[key]
    assert client.loop.run_until_complete(client.app.ext.reread(uid, *key)) == \
        ("gone" if since == "deleted" else "bound")
    assert cache.core.card("s4-mthreads-0").idle == (since == "deleted")
    assert not cache.core.uncertain() and not cache.core.assumed()


def test_a_pod_seen_bound_before_the_relist_is_not_read_again(setup):
    client, cache, api = setup
    a = pending(api, pod(whole(1, 96)))
    assert filtered(client, a, ["s4"])["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(a, "s4")).get_json() == {"Error": ""}
    cache.apply("pod", "MODIFIED", api.pods[("default", a["metadata"]["name"])])
    cache.apply("pod", "RESET", [])  # and gone since: forgotten, nothing left to read
    assert not cache.core.uncertain() and not cache.core.assumed() and cache.core.card("s4-mthreads-0").idle


def test_filter_of_a_pod_whose_write_is_in_doubt_is_an_error(setup):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    api.raise_error = True
    assert "outcome unknown" in client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert filtered(client, p, ["s4"])["Error"] == IN_DOUBT


def test_a_burst_of_filters_and_binds_never_overcommits(setup):
    """Filters of many pods before any bind: each reserves, none is refused at bind time,
    and the reserved cards never exceed a card."""
    client, cache, api = setup
    pods = [pending(api, pod(slice_(32, 6))) for _ in range(8)]
    chosen = {p["metadata"]["uid"]: filtered(client, p, ["s4"])["NodeNames"] for p in pods}
    placed = [p for p in pods if chosen[p["metadata"]["uid"]]]
    assert len(placed) == 4  # 2 cards x 2 slices of 32 units + 6 cores (16 cores a card)
    for p in placed:
        node, = chosen[p["metadata"]["uid"]]
        assert client.post("/bind", json=bind_args(p, node)).get_json() == {"Error": ""}
    per_card: dict[str, int] = {}
    for _, _, body in api.bindings():
        for card, mem, _ in parse_allocated(body["metadata"]["annotations"][ALLOCATED]):
            per_card[card] = per_card.get(card, 0) + mem
    assert all(v <= S4000_MIB for v in per_card.values()), per_card
