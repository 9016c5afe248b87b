"""The extender's request/response handling, with an in-process client of the app and a fake API.

Payloads are shaped as kube-scheduler 1.20 sends them: the extender/v1 Go structs have no
json tags, so the top-level keys are the Go field names (`Pod`, `NodeNames`, `PodUID`...).
"""

from __future__ import annotations

import json
import threading

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import (
    CONFIG,
    add_busy_node,
    args,
    bind_args,
    extender_client,
    no_storage,
    pending,
)
from webhook.extender.cache import WAITING, Cache
from webhook.extender.decisions import NOT_IN_CACHE
from webhook.extender.verbs import NOT_SYNCED
from webhook.scheduling.cache import Phase


def test_filter_96_units_only_on_s4000(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(96, 8)))
    r = client.post("/filter", json=args(p))
    assert r.status_code == 200
    # one node fits: it is the answer, and the others are not given reasons
    assert r.get_json() == {"NodeNames": ["s4"], "FailedNodes": {}, "Error": ""}
    body = client.post("/filter", json=args(pending(api, pod(slice_(96, 8))), ["s5"])).get_json()
    assert body == {"NodeNames": [], "FailedNodes": {"s5": "CardTypeMismatch"}, "Error": ""}


def test_filter_128_and_160_only_on_s5000(setup):
    client, cache, api = setup
    for units in (128, 160):
        p = pending(api, pod(slice_(units)))
        assert client.post("/filter", json=args(p)).get_json()["NodeNames"] == ["s5"]
        body = client.post("/filter", json=args(p, ["s4"])).get_json()
        assert body["NodeNames"] == [] and body["FailedNodes"] == {"s4": "CardTypeMismatch"}


def test_filter_reads_lower_case_keys_and_node_list_form(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(96, 8)))
    body = client.post("/filter", json={"pod": p, "nodenames": ["s4"]}).get_json()
    assert body["NodeNames"] == ["s4"]
    nodes = {"items": [mt_node("s4"), mt_node("s5", units=160)]}
    body = client.post("/filter", json={"Pod": p, "Nodes": nodes, "NodeNames": None}).get_json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["s4"]
    assert body["NodeNames"] is None and body["FailedNodes"] == {}


def test_filter_unknown_node_and_bad_body(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(8, 2)))
    assert client.post("/filter", json=args(p, ["s4", "ghost"])).get_json()["NodeNames"] == ["s4"]
    body = client.post("/filter", json=args(p, ["ghost"])).get_json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {"ghost": NOT_IN_CACHE}
    r = client.post("/filter", data="not json")
    assert r.status_code == 400 and r.get_json()["Error"].startswith("bad request")


def test_not_synced_is_an_error(setup):
    _, _, api = setup
    cache = Cache(CONFIG)
    client = extender_client(cache, api, ready_wait=0.05)  # it waits a little for the list first
    p = pod(slice_(8, 2))
    assert client.post("/filter", json=args(p)).get_json()["Error"] == NOT_SYNCED
    assert client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"] == NOT_SYNCED
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").status_code == 200


def test_invalid_request_fails_every_node(setup):
    client, cache, api = setup
    bad = slice_(8, 2)
    bad["resources"]["limits"]["mthreads.com/vgpu"] = "2"
    bad["resources"]["requests"]["mthreads.com/vgpu"] = "2"
    p = pending(api, pod(bad))
    body = client.post("/filter", json=args(p)).get_json()
    assert body["NodeNames"] == []
    assert all(v.startswith("InvalidRequest: the pod breaks admission rule 4")
               for v in body["FailedNodes"].values()), body


@pytest.mark.parametrize("quantity", ["10e999999", "1e2147483647"])
def test_a_pod_asking_past_int64_is_filtered_as_any_other(setup, quantity):
    """Issue 46, finding 1: /filter answered such a pod with decimal.Overflow's stack trace. The
    resources kube-scheduler counts itself are its to refuse (its NodeResourcesFit, with Value()
    saturating at 2^63-1, offers no node); the extender answers for the cards."""
    client, cache, api = setup
    p = pod(slice_(8, 2))
    p["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = quantity
    r = client.post("/filter", json=args(pending(api, p)))
    assert r.status_code == 200 and r.get_json() == {"NodeNames": ["s4"], "FailedNodes": {}, "Error": ""}


def test_plain_pod_passes_every_node_and_binds_without_annotations(setup):
    client, cache, api = setup
    p = pending(api, pod())
    assert client.post("/filter", json=args(p)).get_json()["NodeNames"] == ["s4", "s5"]
    assert client.post("/bind", json=bind_args(p, "s5")).get_json() == {"Error": ""}
    (_, path, body), = api.bindings()
    assert "annotations" not in body["metadata"] and body["target"]["name"] == "s5"


def test_prioritize_by_node_policy(setup):
    client, cache, api = setup
    add_busy_node(client, cache, api, busy="s4")
    p = pending(api, pod(slice_(8, 2)))
    got = client.post("/prioritize", json=args(p, ["s4", "s4b"])).get_json()
    assert got == [{"Host": "s4", "Score": 3}, {"Host": "s4b", "Score": 0}]  # binpack (default)
    # the policy is read from the API server's pod: the body's annotations change nothing
    p["metadata"]["annotations"]["hami.io/node-scheduler-policy"] = "spread"
    got = client.post("/prioritize", json=args(p, ["s4", "s4b"])).get_json()
    assert got == [{"Host": "s4", "Score": 3}, {"Host": "s4b", "Score": 0}]
    pending(api, p)
    got = client.post("/prioritize", json=args(p, ["s4", "s4b"])).get_json()
    assert got == [{"Host": "s4", "Score": 7}, {"Host": "s4b", "Score": 10}]


def test_bind_writes_one_binding_with_spec_annotations(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(32, 8, name="a"), slice_(16, 4, name="b")))
    assert client.post("/bind", json=bind_args(p, "s4")).get_json() == {"Error": ""}
    (method, path, body), = api.bindings()
    m = p["metadata"]
    assert path == f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}/binding"
    assert body["metadata"]["uid"] == m["uid"] and body["target"] == {
        "apiVersion": "v1", "kind": "Node", "name": "s4"}
    ann = body["metadata"]["annotations"]
    assert ann["hami.io/mthreads-vgpu-devices-allocated"] == \
        "s4-mthreads-0,Mthreads,16384,8:;s4-mthreads-0,Mthreads,8192,4:;"  # both slices, one card
    assert ann["mthreads.com/gpu-index"] == "0"
    assert ann["mthreads.com/predicate-node"] == ann["hami.io/vgpu-node"] == "s4"
    assert ann["hami.io/bind-phase"] == "allocating"
    assert ann["hami.io/vgpu-time"] == ann["hami.io/bind-time"]
    # assumed at once: the next filter sees the card used
    assert cache.core.card("s4-mthreads-0").memory_mib == 24576
    # the watch then shows it bound: the same share, not twice
    bound = json.loads(json.dumps(p))
    bound["spec"]["nodeName"] = "s4"
    bound["metadata"]["annotations"].update(ann)
    cache.apply("pod", "MODIFIED", bound)
    assert cache.core.card("s4-mthreads-0").memory_mib == 24576 and not cache.core.assumed()


def test_exclusive_takes_an_idle_card(setup):
    client, cache, api = setup
    a = pending(api, pod(slice_(8, 2)))
    assert client.post("/bind", json=bind_args(a, "s4")).get_json() == {"Error": ""}
    ex = pending(api, pod(whole(1, 96)))
    assert client.post("/bind", json=bind_args(ex, "s4")).get_json() == {"Error": ""}
    ann = api.bindings()[-1].body["metadata"]["annotations"]
    assert ann["hami.io/mthreads-vgpu-devices-allocated"] == "s4-mthreads-1,Mthreads,49152,16:;"
    ex2 = pending(api, pod(whole(1, 96)))
    body = client.post("/filter", json=args(ex2, ["s4"])).get_json()
    assert body["FailedNodes"] == {"s4": "ExclusiveDeviceAllocateConflict"}


def test_filter_counts_the_reservations_of_binds_not_arrived_yet(setup):
    """kube-scheduler filters pod c before the binds of a and b arrive: their reservations
    are counted, so c is refused at filter time (it waits for room) instead of being sent to
    a node whose last card a bind then takes."""
    client, cache, api = setup
    a, b, c = (pending(api, pod(whole(1, 96))) for _ in range(3))
    assert client.post("/filter", json=args(a, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert client.post("/filter", json=args(b, ["s4"])).get_json()["NodeNames"] == ["s4"]
    body = client.post("/filter", json=args(c, ["s4"])).get_json()
    assert body["NodeNames"] == [] and body["FailedNodes"] == {"s4": "ExclusiveDeviceAllocateConflict"}
    assert client.post("/bind", json=bind_args(b, "s4")).get_json() == {"Error": ""}
    assert client.post("/bind", json=bind_args(a, "s4")).get_json() == {"Error": ""}
    cards = [body["metadata"]["annotations"]["mthreads.com/gpu-index"] for _, _, body in api.bindings()]
    assert sorted(cards) == ["0", "1"]  # each bind wrote its own reservation


def test_bind_without_a_reservation_is_refused_when_the_cards_are_taken(setup):
    """A bind whose reservation lapsed decides on the state of that moment: never an overcommit."""
    client, cache, api = setup
    a, b, c = (pending(api, pod(whole(1, 96))) for _ in range(3))
    for p in (a, b, c):
        assert client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"] in (
            "", "node s4: ExclusiveDeviceAllocateConflict")
    assert len(api.bindings()) == 2


@pytest.mark.parametrize("status", [409, 404, 500])
def test_refused_binding_rolls_back(setup, status):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    api.status = status
    if status == 404:  # deleted after its filter: the reservation's bind finds it gone
        assert client.post("/filter", json=args(p, ["s4"])).get_json()["NodeNames"] == ["s4"]
        api.pods.clear()
    err = client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert err.startswith("binding ") and str(status) in err
    assert cache.core.card("s4-mthreads-0").idle and not cache.core.assumed()


def test_409_counts_the_real_binding(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(8, 2)))
    assert client.post("/filter", json=args(p, ["s4"])).get_json()["NodeNames"] == ["s4"]
    # then bound by someone else, before kube-scheduler's bind comes
    other = api.pods[(p["metadata"]["namespace"], p["metadata"]["name"])]
    other["spec"]["nodeName"] = "s4"
    other["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"] = \
        "s4-mthreads-1,Mthreads,4096,2:;"
    api.status = 409
    assert "409" in client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert cache.core.card("s4-mthreads-0").idle
    assert cache.core.card("s4-mthreads-1").memory_mib == 4096


def test_unknown_outcome_keeps_the_share_until_read(setup):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    api.raise_error = True
    err = client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert "outcome unknown" in err
    assert not cache.core.card("s4-mthreads-0").idle and cache.core.phase(p["metadata"]["uid"]) is Phase.UNCERTAIN
    # kube-scheduler retries: the extender re-reads the pod (still unbound), frees the old
    # share and decides again: one card, not two
    api.raise_error = False
    assert client.post("/bind", json=bind_args(p, "s4")).get_json() == {"Error": ""}
    held = [c for c in ("s4-mthreads-0", "s4-mthreads-1") if not cache.core.card(c).idle]
    assert len(held) == 1 and not cache.core.uncertain()


def test_retry_of_a_pod_that_did_get_bound(setup):
    client, cache, api = setup
    p = pending(api, pod(whole(1, 96)))
    api.raise_error = True
    client.post("/bind", json=bind_args(p, "s4"))
    stored = api.pods[(p["metadata"]["namespace"], p["metadata"]["name"])]
    stored["spec"]["nodeName"] = "s4"  # it did happen
    stored["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"] = \
        "s4-mthreads-0,Mthreads,49152,16:;"
    api.raise_error = False
    assert "already bound" in client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert not cache.core.card("s4-mthreads-0").idle and cache.core.card("s4-mthreads-1").idle


def test_concurrent_binds_never_overcommit(setup):
    client, cache, api = setup
    api.delay = 0.02  # the writes overlap
    pods = [pending(api, pod(slice_(32, 6))) for _ in range(12)]
    results = [r.get_json()["Error"] for r in client.gather([("/bind", bind_args(p, "s4")) for p in pods])]
    assert results.count("") == 4  # 2 cards x 2 slices of 32+6 (cores: 16 per card)
    per_card: dict[str, int] = {}
    for _, _, body in api.bindings():
        entry = body["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"]
        card, _, mem, _ = entry.rstrip(":;").split(",")
        per_card[card] = per_card.get(card, 0) + int(mem)
    assert all(v <= 96 * 512 for v in per_card.values()), per_card


def test_a_filter_during_the_first_list_waits_for_it(setup):
    """Just after a start kube-scheduler may call before the list is done: the call waits for
    it (bounded) instead of answering an error, which would park the pod for up to a minute."""
    _, _, api = setup
    cache = Cache(CONFIG)
    client = extender_client(cache, api)
    p = pod(slice_(8, 2))

    def listed():
        cache.apply("node", "RESET", [mt_node("s4", cards=2, units=96)])
        cache.apply("pod", "RESET", [])
        cache.apply(WAITING, "RESET", [p])
        no_storage(cache)
    timer = threading.Timer(0.3, listed)
    timer.start()
    try:
        body = client.post("/filter", json=args(p, ["s4"])).get_json()
    finally:
        timer.join()
    assert body["Error"] == "" and body["NodeNames"] == ["s4"]
