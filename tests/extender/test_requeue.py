"""Room outside kube-scheduler's node sample: the filter finds none of the nodes it was offered
fits, but another node does; the pod is put back in kube-scheduler's queue by raising its
requeue annotation (docs/extender.md, "Node sample")."""

from __future__ import annotations

import asyncio

from tests.builders import mt_node, slice_
from tests.builders import sched_pod as pod
from tests.extender.messages import args, pending
from webhook.model.annotations import REQUEUES


def run_requeues(client) -> None:
    """Let the requeue writes the filter started finish (they run after its answer)."""
    ext = client.app.ext
    if ext.requeues:
        client.loop.run_until_complete(asyncio.gather(*ext.requeues))


def full_node(name: str, labels: dict | None = None) -> dict:
    """An S4000 node with no memory left to hand out (allocatable 0)."""
    return mt_node(name, cards=1, units=96, labels=labels,
                   allocatable={"mthreads.com/sgpu-memory": "0"})


def test_room_outside_the_offered_nodes_requeues_the_pod(setup):
    client, cache, api = setup
    cache.apply("node", "ADDED", full_node("s4full"))
    p = pending(api, pod(slice_(16, 2)))
    body = client.post("/filter", json=args(p, ["s4full"])).get_json()
    assert body["NodeNames"] == [] and list(body["FailedNodes"]) == ["s4full"]
    run_requeues(client)
    (method, path, patch), = api.patches()
    meta = p["metadata"]
    # pods/status, which takes the annotations: the chart grants no patch of pods themselves
    assert path == f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
    assert patch == {"metadata": {"uid": meta["uid"], "annotations": {REQUEUES: "1"}}}
    assert not cache.core.reservations()  # nothing is held for it: the next filter decides afresh


def test_the_count_goes_up_and_stops_at_the_limit(setup):
    """3 nodes, 1 offered: 3 samples of that size cover the cluster, plus 2 = 5 requeues."""
    client, cache, api = setup
    cache.apply("node", "ADDED", full_node("s4full"))
    p = pending(api, pod(slice_(16, 2)))
    seen = []
    for _ in range(7):
        client.post("/filter", json=args(p, ["s4full"]))
        run_requeues(client)
        got = api.patches()
        if len(got) > len(seen):
            seen = got
            p["metadata"].setdefault("annotations", {})[REQUEUES] = got[-1].body["metadata"]["annotations"][REQUEUES]
            pending(api, p)  # the patch, as the API server would hold it
    assert [c.body["metadata"]["annotations"][REQUEUES] for c in seen] == ["1", "2", "3", "4", "5"]


def test_no_requeue_when_no_node_has_room(setup):
    client, cache, api = setup
    p = pending(api, pod(slice_(160, 16), slice_(2, name="b")))  # 162 units: no card
    body = client.post("/filter", json=args(p, ["s5"])).get_json()
    assert body["NodeNames"] == []
    run_requeues(client)
    assert api.patches() == []


def test_no_requeue_for_a_node_the_pod_may_not_go_to(setup):
    """The room is on a node the pod's nodeSelector excludes: kube-scheduler refused it for
    its own rules, and a new cycle would not change that."""
    client, cache, api = setup
    cache.apply("node", "RESET", [full_node("s4full", {"pool": "a"}),
                                  mt_node("s4b", cards=1, units=96, labels={"pool": "b"})])
    p = pod(slice_(16, 2))
    p["spec"]["nodeSelector"] = {"pool": "a"}
    pending(api, p)
    assert client.post("/filter", json=args(p, ["s4full"])).get_json()["NodeNames"] == []
    run_requeues(client)
    assert api.patches() == []


def test_a_refused_requeue_is_logged_and_the_filter_answered(setup, caplog):
    client, cache, api = setup
    api.patch_status = 422  # say the pod of that name is another one now (the uid differs)
    cache.apply("node", "ADDED", full_node("s4full"))
    p = pending(api, pod(slice_(16, 2)))
    with caplog.at_level("INFO", logger="webhook.extender"):
        body = client.post("/filter", json=args(p, ["s4full"])).get_json()
        run_requeues(client)
    assert body["NodeNames"] == [] and body["Error"] == ""
    assert len(api.patches()) == 1 and not client.app.ext.requeues
    assert any(r.message.startswith("requeue ") and "HTTP 422" in r.message
               for r in caplog.records), [r.message for r in caplog.records]
