"""Nominated pods in extender mode: kube-scheduler runs its own filters with its nominated pods
(cpu, memory, ports, affinity: RunFilterPluginsWithNominatedPods) and then asks the extender
about the nodes that pass, so the extender holds what kube-scheduler cannot see, the cards, of
the pods waiting for its scheduler that a preemption nominated (its watch of waiting pods), for
the filter, the bind's check and the victim search, and nothing kube-scheduler holds already."""

from __future__ import annotations

import pytest

from tests.builders import mt_node, nominated, plain, slice_
from tests.builders import sched_pod as pod
from tests.extender.messages import CONFIG
from webhook.extender.cache import WAITING, Cache
from webhook.model import annotations as keys
from webhook.scheduling import reasons
from webhook.scheduling.request import request_of


def cache_with(*waiting, bound=()):
    cache = Cache(CONFIG)
    cache.apply("node", "RESET", [mt_node("g1", 1), mt_node("g2", 1)])
    cache.apply("pod", "RESET", list(bound))
    cache.apply(WAITING, "RESET", list(waiting))
    return cache


def nominee(*containers, priority=10, on="g1"):
    return nominated(pod(*containers, spec={"priority": priority}), on)


def filtered(cache, p, names=("g1",)):
    """(the node reserved or None, the reasons)."""
    result = cache.reserve(p, request_of(p, CONFIG), list(names), now=0.0)
    assert not isinstance(result, str), result
    chosen, failed, _ = result
    return (chosen.node if chosen else None), failed


@pytest.mark.parametrize("case, priority, on, fits", [
    ("lower priority", 0, "g1", False),
    ("equal priority", 10, "g1", False),
    ("higher priority", 11, "g1", True),
    ("nominated for another node", 0, "g2", True),
])
def test_the_filter_holds_a_nominee_s_cards(case, priority, on, fits):
    cache = cache_with(nominee(slice_(64), on=on))
    node, failed = filtered(cache, pod(slice_(64), spec={"priority": priority}))
    assert (node == "g1") is fits
    if not fits:
        assert failed == {"g1": reasons.INSUFFICIENT_CARD_MEMORY}


def test_the_pod_itself_nominated_is_not_held_against_itself():
    p = nominee(slice_(64), priority=0)
    cache = cache_with(p)
    assert filtered(cache, p)[0] == "g1"


def test_what_kube_scheduler_holds_is_not_counted_again():
    """A nominee's cpu is kube-scheduler's to hold (it ran its filters with it before asking):
    the extender's filter refuses no node for it."""
    cache = cache_with(nominee(plain(cpu="30")))
    assert filtered(cache, pod(slice_(64, cpu="4")))[0] == "g1"


def test_a_nomination_cleared_or_gone_frees_the_cards():
    n = nominee(slice_(64))
    cache = cache_with(n)
    p = pod(slice_(64))
    assert filtered(cache, p)[0] is None
    cleared = {**n, "status": {"phase": "Pending"}}
    cache.apply(WAITING, "MODIFIED", cleared)
    assert filtered(cache, p)[0] == "g1"
    cache.core.release(p["metadata"]["uid"])
    cache.apply(WAITING, "MODIFIED", n)
    assert filtered(cache, p)[0] is None
    cache.apply(WAITING, "DELETED", n)
    assert filtered(cache, p)[0] == "g1"


def test_a_bind_checks_the_nominee_s_cards_too():
    cache = cache_with(nominee(slice_(64)))
    p = pod(slice_(64))
    assert cache.choose_and_assume(p, request_of(p, CONFIG), "g1") == reasons.INSUFFICIENT_CARD_MEMORY


def test_the_victim_search_leaves_a_nominee_its_room():
    low = pod(slice_(64), node="g1", phase="Running", spec={"priority": 0},
              annotations={keys.ALLOCATED: "g1-mthreads-0,Mthreads,32768,0:;"})
    p = pod(slice_(64), spec={"priority": 50})
    cache = cache_with(bound=[low])
    assert cache.victims(p, request_of(p, CONFIG), {"g1": ([], 0)}) == \
        {"g1": ([low["metadata"]["uid"]], 0)}
    cache.apply(WAITING, "ADDED", nominee(slice_(64), priority=100))
    assert cache.victims(p, request_of(p, CONFIG), {"g1": ([], 0)}) == {}


def test_a_waiting_pod_of_the_wrong_shape_is_named():
    bad = nominee(slice_(64))
    bad["status"]["nominatedNodeName"] = 7
    cache = cache_with()
    failed = cache.apply(WAITING, "ADDED", bad)
    assert [f.what for f in failed] == ["ValueError: status.nominatedNodeName is not a string: 7"]
    assert filtered(cache, pod(slice_(64)))[0] == "g1"
