"""The extender's filter and bind against a node's allocatable, and terminal pods freeing
their cards, through the in-process app client and a fake API (tests/extender/messages.py)."""

from __future__ import annotations

import json

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import args, bind_args, pending

MEM = "mthreads.com/sgpu-memory"
ONE_CARD_DOWN = {MEM: "96", "mthreads.com/sgpu-core": "16"}


def bind(client, cache, api, p, node):
    """Bind through the extender, then show the pod bound as the watch would."""
    assert client.post("/bind", json=bind_args(p, node)).get_json() == {"Error": ""}
    bound = json.loads(json.dumps(p))
    bound["spec"]["nodeName"] = node
    bound["metadata"]["annotations"].update(api.bindings()[-1].body["metadata"]["annotations"])
    bound["status"]["phase"] = "Running"
    cache.apply("pod", "MODIFIED", bound)
    return bound


def test_filter_and_bind_hold_to_allocatable(setup):
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", 2, 96, allocatable=ONE_CARD_DOWN))
    first = pending(api, pod(slice_(64, 8)))
    assert client.post("/filter", json=args(first, ["s4"])).get_json()["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(first, "s4")).get_json() == {"Error": ""}
    # assumed at once: before the watch shows it bound, 64 of the 96 allocatable are held
    second = pending(api, pod(slice_(64, 8)))
    body = client.post("/filter", json=args(second, ["s4", "s5"])).get_json()
    assert body["NodeNames"] == ["s5"]  # the node chosen (and reserved); no reasons while one fits
    assert client.post("/filter", json=args(second, ["s4"])).get_json()["FailedNodes"] == {
        "s4": f"Insufficient {MEM}"}
    assert client.post("/bind", json=bind_args(second, "s4")).get_json() == {
        "Error": f"node s4: Insufficient {MEM}"}
    small = pending(api, pod(slice_(32, 8)))
    assert client.post("/filter", json=args(small, ["s4"])).get_json()["NodeNames"] == ["s4"]
    # the plugin reports the card healthy again: room for the second
    cache.apply("node", "MODIFIED", mt_node("s4", 2, 96))
    assert client.post("/filter", json=args(second, ["s4"])).get_json()["NodeNames"] == ["s4"]


def test_a_node_whose_capacity_is_not_cards_is_named(setup):
    client, cache, api = setup
    cache.apply("node", "MODIFIED", mt_node("s4", capacity={MEM: "96", "mthreads.com/sgpu-core": "40"}))
    p = pending(api, pod(slice_(8, 2)))
    assert client.post("/filter", json=args(p, ["s4"])).get_json()["FailedNodes"] == {
        "s4": "NodeCardsInconsistent (s4: mthreads.com/sgpu-core=40 is not a multiple of 16)"}


def test_a_pod_that_ended_frees_its_cards(setup):
    """The status of a pod that ran to the end, as the kubelet writes it: its card is free
    for the next, whether the watch shows the change or (field selector) its removal."""
    client, cache, api = setup
    for event in ("MODIFIED", "DELETED"):
        for phase in ("Succeeded", "Failed"):
            running = bind(client, cache, api, pending(api, pod(whole(2, 96))), "s4")
            nxt = pending(api, pod(whole(1, 96)))
            assert client.post("/filter", json=args(nxt, ["s4"])).get_json()["FailedNodes"] == {
                "s4": "ExclusiveDeviceAllocateConflict"}
            running["status"]["phase"] = phase
            cache.apply("pod", event, running)
            assert cache.core.read(lambda state: state.devices_on("s4") == state.devices_on("nowhere"))
            assert client.post("/filter", json=args(nxt, ["s4"])).get_json()["NodeNames"] == ["s4"]
            cache.apply("pod", "DELETED", nxt)
