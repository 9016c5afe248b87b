"""Why a pod waits and what would make room (webhook/scheduling/explain.py), as tables over
plain pods and nodes: each node's reason in the allocator's words, card by card in figures,
and the fewest lower-priority pods whose removal lets the pod fit (a dry run)."""

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from webhook.model import annotations as keys
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling import reasons
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.explain import explain
from webhook.scheduling.priority import pod_priority
from webhook.scheduling.request import request_of

MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)


def holder(node, card, units, cores=None, priority=0, name=None, terminating=False, text=None):
    """A running pod holding `units` of card `card` of `node`."""
    p = pod(slice_(units, cores), node=node, phase="Running", name=name, namespace="team",
            spec={"priority": priority}, annotations={
                keys.ALLOCATED: text or f"{node}-mthreads-{card},Mthreads,{units * 512},{cores or 0}:;"})
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return p


def explained(p, nodes, bound=()):
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", nodes)
    cache.apply("pod", "RESET", list(bound))
    with cache.deciding() as state:
        return explain(p, request_of(p, CONFIG), state, CONFIG, cache.holders(state.nodes),
                       pod_priority(p))


LIMIT_2 = {keys.MAX_INSTANCES: "2"}


@pytest.mark.parametrize("case, p, node, bound, reason, cards", [
    ("fragmented memory", pod(slice_(64, 4)), mt_node("n", 2),
     [holder("n", 0, 32), holder("n", 0, 16), holder("n", 0, 8), holder("n", 1, 32), holder("n", 1, 16),
      holder("n", 1, 8)],
     reasons.INSUFFICIENT_CARD_MEMORY,
     ["40 of 96 units free, the pod needs 64", "40 of 96 units free, the pod needs 64"]),
    ("cores", pod(slice_(8, 8)), mt_node("n", 1), [holder("n", 0, 8, 12)],
     reasons.INSUFFICIENT_CARD_CORES, ["4 of 16 core groups free, the pod needs 8"]),
    ("cores all reserved", pod(slice_(8)), mt_node("n", 1), [holder("n", 0, 8, 16)],
     reasons.CORES_EXHAUSTED,
     ["all 16 core groups reserved; a slice without cores needs one free"]),
    ("instances", pod(slice_(2)), mt_node("n", 1, annotations=LIMIT_2),
     [holder("n", 0, 2), holder("n", 0, 2)], reasons.TIME_SLICING_EXHAUSTED,
     ["2 of 2 containers, the pod adds 1"]),
    ("cordoned and full", pod(slice_(64)), mt_node("n", 2, annotations={keys.CORDON: "n-mthreads-1"}),
     [holder("n", 0, 64)], reasons.INSUFFICIENT_CARD_MEMORY,
     ["32 of 96 units free, the pod needs 64",
      "cordoned (the node's hami.io/device-cordon): takes no new pod"]),
    ("whole card of a busy card", pod(whole(1, 96)), mt_node("n", 1), [holder("n", 0, 2)],
     reasons.EXCLUSIVE_CONFLICT, ["not idle: 1 pod(s) hold a share, the pod needs it whole"]),
    ("held whole", pod(slice_(2)), mt_node("n", 1), [holder("n", 0, 96, 16)],
     reasons.EXCLUSIVE_CONFLICT, ["full: all its memory and cores are handed out"]),
    ("garbled: held whole", pod(slice_(2)), mt_node("n", 1), [holder("n", 0, 2, text="n-mthreads-0,x")],
     reasons.EXCLUSIVE_CONFLICT, ["held whole by a pod"]),
    ("model", pod(slice_(96)), mt_node("n", 1, 160), [], reasons.TYPE_MISMATCH,
     ["model MTT-S5000; the pod's request is for MTT-S4000"]),
    ("nouse", pod(slice_(8), annotations={keys.NOUSE_CARDS: "n-mthreads-0"}), mt_node("n", 1), [],
     reasons.UUID_MISMATCH, ["in the pod's mthreads.ai/nouse-gpuuuid"]),
    ("two whole cards, one free", pod(whole(2, 96)), mt_node("n", 2), [holder("n", 1, 2)],
     reasons.EXCLUSIVE_CONFLICT,
     ["could take it: 96 of 96 units, 16 core groups and 16 of 16 containers free",
      "not idle: 1 pod(s) hold a share, the pod needs it whole"]),
])
def test_card_by_card_in_figures(case, p, node, bound, reason, cards):
    e = explained(p, [node], bound)
    (n,) = e.nodes
    assert (n.reason, [c.detail for c in n.cards]) == (reason, cards)
    assert [c.card.index for c in n.cards] == list(range(len(cards)))
    assert e.placement is None and reason in e.message


@pytest.mark.parametrize("case, p, node, bound, reason, detail", [
    ("no cards", pod(slice_(8)), mt_node("n", 0), [], reasons.NO_DEVICE, "0 card(s); the pod asks for 1"),
    ("fewer cards", pod(whole(2, 96)), mt_node("n", 1), [], reasons.NO_DEVICE, "1 card(s); the pod asks for 2"),
    ("capacity not cards", pod(slice_(8)),
     mt_node("n", capacity={"pods": "110", "mthreads.com/sgpu-core": "20",
                            "mthreads.com/sgpu-memory": "96"}), [],
     reasons.INCONSISTENT, "mthreads.com/sgpu-core=20 is not a multiple of 16"),
    ("allocatable", pod(slice_(64, 4)), mt_node("n", 2, allocatable={"mthreads.com/sgpu-memory": "96"}),
     [holder("n", 0, 64)], "Insufficient mthreads.com/sgpu-memory",
     "allocatable mthreads.com/sgpu-memory is 96; the pods bound there request 64, the pod 64"),
    ("taint: the node's own words", pod(slice_(8)),
     mt_node("n", 1, taints=[{"key": "gpu", "effect": "NoSchedule"}]), [], reasons.TAINTED, ""),
])
def test_the_node_s_reason_and_what_it_does_not_say(case, p, node, bound, reason, detail):
    (n,) = explained(p, [node], bound).nodes
    assert (n.reason, n.detail, n.cards) == (reason, detail, ())


def test_a_pod_that_fits_says_where_the_allocator_would_bind_it():
    e = explained(pod(slice_(8, 4)), [mt_node("a", 1), mt_node("b", 1, taints=[
        {"key": "gpu", "effect": "NoSchedule"}])], [holder("a", 0, 8, 4)])
    assert e.placement is not None and e.placement.node == "a" and e.room is None
    assert [(n.node, n.reason, [c.id for c in n.chosen]) for n in e.nodes] == [
        ("a", None, ["a-mthreads-0"]), ("b", reasons.TAINTED, [])]


def test_the_fewest_victims_lowest_priority_first_on_some_node():
    """Node a needs two removals, b one; of b's two equal holders the lower priority goes."""
    nodes = [mt_node("a", 1), mt_node("b", 1)]
    bound = [holder("a", 0, 48, 4, priority=0, name="a1"), holder("a", 0, 48, 4, priority=0, name="a2"),
             holder("b", 0, 64, 4, priority=5, name="b-low"), holder("b", 0, 32, 4, priority=50, name="b-high")]
    e = explained(pod(slice_(64, 4), spec={"priority": 100}), nodes, bound)
    assert e.room is not None and e.room.node == "b"
    assert [(h.priority, h.share.uid) for h in e.room.victims] == [
        (5, next(p["metadata"]["uid"] for p in bound if p["metadata"]["name"] == "b-low"))]


@pytest.mark.parametrize("case, p, nodes, bound, room", [
    ("equal priority is never a victim", pod(slice_(64, 4), spec={"priority": 10}),
     [mt_node("a", 1)], [holder("a", 0, 64, 4, priority=10)], None),
    ("no priority at all", pod(slice_(64, 4)), [mt_node("a", 1)], [holder("a", 0, 64, 4)], None),
    ("a node refused for its own rules is not made room on", pod(slice_(64, 4), spec={"priority": 10}),
     [mt_node("a", 1, taints=[{"key": "gpu", "effect": "NoSchedule"}])], [holder("a", 0, 64, 4)], None),
    ("a cordoned card is not made room on", pod(slice_(64, 4), spec={"priority": 10}),
     [mt_node("a", 1, annotations={keys.CORDON: "a-mthreads-0"})], [holder("a", 0, 64, 4)], None),
    ("terminating pods are enough", pod(slice_(64, 4), spec={"priority": 10}),
     [mt_node("a", 1)], [holder("a", 0, 64, 4, terminating=True)], ("a", 0)),
    ("an instance freed", pod(slice_(2), spec={"priority": 10}),
     [mt_node("a", 1, annotations=LIMIT_2)], [holder("a", 0, 2), holder("a", 0, 2)], ("a", 1)),
])
def test_when_removals_make_room(case, p, nodes, bound, room):
    e = explained(p, nodes, bound)
    assert e.placement is None
    assert (None if e.room is None else (e.room.node, len(e.room.victims))) == room


def test_an_invalid_pod_is_never_placed():
    e = explained(pod(slice_(3)), [mt_node("a", 1)])
    assert e.invalid and e.invalid.startswith("InvalidRequest: ") and e.nodes == ()
