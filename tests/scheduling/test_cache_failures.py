"""The scheduler cache's apply boundary (issue 46, finding 2): an object that raises while
applied is handed back named, the maps stay as they were before it (a bound pod is never
forgotten, so its cards are not handed out twice), and the other objects of a list are
applied all the same."""

from __future__ import annotations

import pytest

from tests.builders import mt_node, plain, raising, sched_pod, slice_
from tests.scheduling.test_cache import CARD, assumed, bound, cache, used
from webhook.scheduling.cache import SchedulerCache


def counted(c: SchedulerCache) -> dict:
    """What a decision reads of the cache, card by card and node by node."""
    cards = {f"n{n}-mthreads-{i}": c.card(f"n{n}-mthreads-{i}") for n in range(2) for i in range(2)}
    return {"cards": {k: (u.memory_mib, u.cores, u.whole) for k, u in cards.items()},
            "nodes": c.node_count(), "generation": c.generation}


SEEN = bound(sched_pod(slice_(16, 4), name="seen"))  # bound, 8192 MiB and 4 cores on CARD


@pytest.mark.parametrize("kind, event, obj, held", [
    # a bound pod seen before: still counted for what it held
    ("pod", "MODIFIED", raising(SEEN), (8192, 4, 0)),
    # a pod bound by us, never seen: the cards its annotation names held whole
    ("pod", "ADDED", raising(bound(sched_pod(slice_(16, 4), name="new"))), (8192 + 0, 4, 1)),
    # bound without an allocation annotation: it holds no card
    ("pod", "ADDED", raising(sched_pod(plain(), name="plain", node="n0")), (8192, 4, 0)),
    ("pod", "DELETED", raising(SEEN, "metadata"), (8192, 4, 0)),
    ("node", "MODIFIED", raising(mt_node("n0", 2, 96), "status"), (8192, 4, 0)),
    ("node", "ADDED", raising(mt_node("n1", 2, 96), "status"), (8192, 4, 0)),
    ("pvc", "ADDED", raising({"metadata": {}}, "metadata"), (8192, 4, 0)),
], ids=["bound pod updated", "new pod bound by us", "new pod without cards", "pod deleted",
        "node updated", "node added", "claim"])
def test_one_object_that_raises_is_handed_back_and_changes_nothing_else(kind, event, obj, held):
    c = cache()
    c.apply("pod", "ADDED", SEEN)
    before = counted(c)
    failed = c.apply(kind, event, obj)
    (err,) = failed
    assert (err.kind, type(err.error), str(err.error)) == (kind, RuntimeError, "injected failure")
    assert err.what == "RuntimeError: injected failure"
    if kind != "pvc" and event != "DELETED":
        assert (err.namespace, err.name) == (obj["metadata"].get("namespace", ""),
                                             obj["metadata"]["name"])
    after = counted(c)
    assert after["cards"][CARD] == held
    if held[2] == 0:  # nothing new to hold: every map as before
        assert after == before
    assert c.node_count() == 1 and c.node_count() == before["nodes"]


def test_a_relist_of_pods_goes_on_past_one_that_raises_and_forgets_no_bound_pod():
    c = cache()
    other = bound(sched_pod(slice_(8, 2), name="other"), 4096, 2, card="n0-mthreads-1")
    c.apply("pod", "RESET", [SEEN, other])
    waiting = sched_pod(slice_(8, 2), name="waiting")
    assumed(c, waiting, 4096, 2)  # our binding of it under way, on CARD
    late = bound(sched_pod(slice_(4, 1), name="late"), 2048, 1, card="n0-mthreads-1")
    failed = c.apply("pod", "RESET", [raising(SEEN), waiting, other, late])
    assert [e.name for e in failed] == ["seen"]
    # the pod that raised counted as before the list, beside the assumed share kept
    assert used(c) == (8192 + 4096, 4 + 2) and c.is_assumed(waiting["metadata"]["uid"])
    assert used(c, "n0-mthreads-1") == (4096 + 2048, 2 + 1)  # the pods after it: indexed


def test_a_relist_of_nodes_keeps_a_node_that_raises_as_it_was():
    c = cache()
    c.apply("pod", "ADDED", SEEN)
    failed = c.apply("node", "RESET", [raising(mt_node("n0", 2, 96), "status"), mt_node("n1", 1, 96)])
    assert [(e.kind, e.name) for e in failed] == [("node", "n0")]
    assert c.node_count() == 2 and used(c) == (8192, 4)
    assert {n.name: len(n.cards.cards) for n in c.snapshot().nodes} == {"n0": 2, "n1": 1}


def test_a_relist_of_claims_goes_on_past_one_that_raises():
    c = cache()
    claims = [{"metadata": {"namespace": "default", "name": f"c{i}"}} for i in range(2)]
    failed = c.apply("pvc", "RESET", [claims[0], raising({}, "metadata"), claims[1]])
    assert len(failed) == 1 and failed[0].name == "" and failed[0].who == "pvc (unnamed)"
    assert c.read(lambda state: sorted(state.storage.claims)) == [("default", "c0"),
                                                                   ("default", "c1")]
