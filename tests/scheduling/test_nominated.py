"""Nominated pods (webhook/scheduling/nominated.py, nominated_fit.py): a pod a preemption
nominated for a node (`status.nominatedNodeName`), not bound yet, counts there for the pods of
lower or equal priority, as kube-scheduler's filter with nominated pods has it
(RunFilterPluginsWithNominatedPods: the nominated pods of priority >= the pod's, not the pod
itself, on that node; the filters run with them and then without them, and both must pass; the
reason is the failing filter's own). Tables of small clusters, then the index under watch events."""

import pytest

from tests.builders import mt_node, nominated, plain, sched_pod, slice_, whole
from tests.scheduling.rules_support import (
    HOST,
    affinity,
    cache_of,
    node,
    pod,
    reasons_for,
    term,
)
from webhook.model import annotations as keys
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling import reasons
from webhook.scheduling.cache import NAMESPACE, SchedulerCache
from webhook.scheduling.decide import NoFit, Placement, place
from webhook.scheduling.explain import explain
from webhook.scheduling.priority import pod_priority
from webhook.scheduling.request import request_of

TWO = [node("n1"), node("n2")]
WEB, DB = {"app": "web"}, {"app": "db"}
CPU = {"cpu": "3"}


def nominee(name, on="n1", priority=10, labels=None, requests=None, ports=None, **spec):
    """A pod nominated for `on`, of `priority`, not bound."""
    return nominated(pod(name, None, labels, requests=requests, ports=ports, priority=priority,
                         **spec), on)


def deciding(name="p", priority=0, labels=None, requests=None, ports=None, **spec):
    return pod(name, None, labels, requests=requests or {"cpu": "2"}, ports=ports,
               priority=priority, **spec)


PORT = [{"containerPort": 8080, "hostPort": 8080}]


@pytest.mark.parametrize("case, others, new, expected", [
    # which nominated pods count: priority >= the pod's, on this node, not the pod itself
    ("higher priority holds its node", [nominee("n", requests=CPU, priority=10)],
     deciding(priority=0), {"n1": reasons.INSUFFICIENT_CPU, "n2": None}),
    ("equal priority holds it too", [nominee("n", requests=CPU, priority=10)],
     deciding(priority=10), {"n1": reasons.INSUFFICIENT_CPU, "n2": None}),
    ("lower priority does not", [nominee("n", requests=CPU, priority=10)],
     deciding(priority=11), {"n1": None, "n2": None}),
    ("another node's nominee holds that node only", [nominee("n", "n2", requests=CPU)],
     deciding(), {"n1": None, "n2": reasons.INSUFFICIENT_CPU}),
    ("the pod itself nominated holds nothing against itself",
     [nominee("p", requests={"cpu": "2"}, priority=0)], deciding(priority=0), {"n1": None, "n2": None}),
    ("without a priority both are 0: equal", [nominated(pod("n", None, requests=CPU), "n1")],
     pod("p", None, requests={"cpu": "2"}), {"n1": reasons.INSUFFICIENT_CPU, "n2": None}),
    ("a finished pod holds nothing",
     [{**nominee("n", requests=CPU), "status": {"phase": "Failed", "nominatedNodeName": "n1"}}],
     deciding(), {"n1": None, "n2": None}),
    ("a bound pod counts where it is bound, its old nomination nowhere",
     [nominated(pod("n", "n2", requests=CPU), "n1")], deciding(),
     {"n1": None, "n2": reasons.INSUFFICIENT_CPU}),
    # what they hold (the first pass): requests, the pod count, host ports, anti-affinity
    ("two nominees' requests add up",
     [nominee("a", requests={"cpu": "1"}), nominee("b", requests={"cpu": "1500m"})],
     deciding(), {"n1": reasons.INSUFFICIENT_CPU, "n2": None}),
    ("memory", [nominee("n", requests={"memory": "7Gi"})], deciding(requests={"memory": "2Gi"}),
     {"n1": reasons.INSUFFICIENT_MEMORY, "n2": None}),
    ("the pod count", [nominee("n")], None, {"n1": reasons.TOO_MANY_PODS, "n2": None}),
    ("host ports", [nominee("n", requests={"cpu": "10m"}, ports=PORT)], deciding(ports=PORT),
     {"n1": reasons.PORTS_IN_USE, "n2": None}),
    ("host ports of a lower-priority nominee are free", [nominee("n", ports=PORT, priority=-1)],
     deciding(ports=PORT), {"n1": None, "n2": None}),
    ("the pod's anti-affinity against a nominee", [nominee("n", labels=WEB)],
     deciding(labels=WEB, **affinity("podAntiAffinity", term(HOST, app="web"))),
     {"n1": reasons.ANTI_AFFINITY_RULES, "n2": None}),
    ("a nominee's anti-affinity against the pod",
     [nominee("n", labels=DB, **affinity("podAntiAffinity", term(HOST, app="web")))],
     deciding(labels=WEB), {"n1": reasons.EXISTING_ANTI_AFFINITY, "n2": None}),
    ("a nominee's anti-affinity in another namespace selects nothing here",
     [nominee("n", labels=DB, ns="b", **affinity("podAntiAffinity", term(HOST, app="web")))],
     deciding(labels=WEB), {"n1": None, "n2": None}),
    # both passes: an affinity only the nominee would satisfy is none (the second pass)
    ("affinity to a nominee alone fails without it", [nominee("n", labels=DB)],
     deciding(labels=WEB, **affinity("podAffinity", term(HOST, app="db"))),
     {"n1": reasons.AFFINITY_RULES, "n2": reasons.AFFINITY_RULES}),
    ("affinity to a bound pod passes with a nominee there too",
     [pod("db", "n1", DB), nominee("n", labels=DB)],
     deciding(labels=WEB, **affinity("podAffinity", term(HOST, app="db"))),
     {"n1": None, "n2": reasons.AFFINITY_RULES}),
    ("the first pass's reason comes first: ports before cpu",
     [nominee("n", requests=CPU, ports=PORT)], deciding(ports=PORT),
     {"n1": reasons.PORTS_IN_USE, "n2": None}),
])
def test_the_filters_with_nominated_pods(case, others, new, expected):
    nodes = TWO
    if new is None:  # the pod count: nodes of one pod each
        nodes = [node("n1", pods="1"), node("n2", pods="1")]
        new = deciding()
    assert reasons_for(new, cache_of(nodes, others)) == expected


def _selecting_team(team: str, **match) -> dict:
    """A required anti-affinity term over the namespaces labelled team=`team`."""
    return {**term(HOST, **match), "namespaceSelector": {"matchLabels": {"team": team}}}


@pytest.mark.parametrize("case, others, new, expected", [
    ("the pod's namespaceSelector term selects a nominee in a namespace it matches",
     [nominee("n", labels=WEB, ns="b")],
     deciding(labels=WEB, **affinity("podAntiAffinity", _selecting_team("blue", app="web"))),
     {"n1": reasons.ANTI_AFFINITY_RULES, "n2": None}),
    ("... and not one in a namespace it does not match",
     [nominee("n", labels=WEB, ns="c")],
     deciding(labels=WEB, **affinity("podAntiAffinity", _selecting_team("blue", app="web"))),
     {"n1": None, "n2": None}),
    ("a nominee's namespaceSelector term reads the pod's namespace's labels",
     [nominee("n", labels=DB, ns="c", **affinity("podAntiAffinity", _selecting_team("blue", app="web")))],
     deciding(labels=WEB), {"n1": reasons.EXISTING_ANTI_AFFINITY, "n2": None}),
    ("... which do not match another team's selector",
     [nominee("n", labels=DB, ns="c", **affinity("podAntiAffinity", _selecting_team("red", app="web")))],
     deciding(labels=WEB), {"n1": None, "n2": None}),
])
def test_nominated_pods_and_namespace_selectors(case, others, new, expected):
    """The pod (namespace a, team=blue) against nominees in b (blue) and c (red): the terms'
    namespaceSelectors read the namespaces' labels on the nominated pods' pass as on the bound."""
    c = SchedulerCache(MthreadsConfig(), kinds=("node", "pod", NAMESPACE))
    c.apply("node", "RESET", TWO)
    c.apply(NAMESPACE, "RESET", [
        {"metadata": {"name": n, "labels": {"team": t}}} for n, t in
        (("a", "blue"), ("b", "blue"), ("c", "red"))])
    c.apply("pod", "RESET", others)
    assert reasons_for(new, c) == expected


def test_without_nominations_the_index_holds_nothing():
    c = cache_of(TWO, [pod("a", "n1"), pod("b", None)])
    with c.deciding() as state:
        assert state.nominated.on_node == {} and state.nominated.node_of == {}


# The cards: a nominee's are held on its node for the pods that yield to it
MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)


def holder(on, card, units, priority=0, name=None, terminating=False):
    p = sched_pod(slice_(units, 4), node=on, phase="Running", name=name,
                  spec={"priority": priority},
                  annotations={keys.ALLOCATED: f"{on}-mthreads-{card},Mthreads,{units * 512},4:;"})
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return p


def card_pod(*containers, priority=0, name=None, on=None):
    p = sched_pod(*containers, name=name, spec={"priority": priority})
    return nominated(p, on) if on else p


def decided(p, nodes, pods):
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", nodes)
    cache.apply("pod", "RESET", list(pods))
    return cache.read(lambda state: place(p, request_of(p, CONFIG), state, CONFIG))


@pytest.mark.parametrize("case, p, nodes, pods, expected", [
    ("a nominee's slice holds the card's memory", card_pod(slice_(64)), [mt_node("g1", 1)],
     [card_pod(slice_(64), priority=10, on="g1")], reasons.INSUFFICIENT_CARD_MEMORY),
    ("a higher-priority pod takes it all the same", card_pod(slice_(64), priority=11),
     [mt_node("g1", 1)], [card_pod(slice_(64), priority=10, on="g1")], ("g1", "0")),
    ("the pod's cards are chosen around the nominee's", card_pod(slice_(32)), [mt_node("g1", 2)],
     # spread would take the idle card 1; the nominee's 64 units fit only there
     [holder("g1", 0, 40), card_pod(slice_(64, 8), priority=10, on="g1")], ("g1", "0")),
    ("a nominee's whole card", card_pod(slice_(8)), [mt_node("g1", 1)],
     [card_pod(whole(1), priority=10, on="g1")], reasons.EXCLUSIVE_CONFLICT),
    ("another node's nominee", card_pod(slice_(64)), [mt_node("g1", 1), mt_node("g2", 1)],
     [card_pod(slice_(64), priority=10, on="g2")], ("g1", "0")),
    ("a nominee whose victim is terminating: the victim's card is its",
     card_pod(slice_(16)), [mt_node("g1", 1)],
     [holder("g1", 0, 64, terminating=True), card_pod(slice_(64), priority=10, on="g1")],
     reasons.INSUFFICIENT_CARD_MEMORY),
    ("a nominee with no room even so holds the node's cards", card_pod(slice_(8)),
     [mt_node("g1", 1)], [holder("g1", 0, 90, priority=100), card_pod(slice_(64), priority=10, on="g1")],
     reasons.EXCLUSIVE_CONFLICT),
    ("a pod without cards is not held back by a nominee's cards", card_pod(plain(cpu="1")),
     [mt_node("g1", 1)], [card_pod(whole(1), priority=10, on="g1")], ("g1", "")),
    ("allocatable: a nominee's requests count against it", card_pod(slice_(64)),
     [mt_node("g1", 2, allocatable={"mthreads.com/sgpu-memory": "96"})],
     [card_pod(slice_(64), priority=10, on="g1")], reasons.insufficient("mthreads.com/sgpu-memory")),
])
def test_cards_held_for_nominated_pods(case, p, nodes, pods, expected):
    result = decided(p, nodes, pods)
    if isinstance(expected, tuple):
        assert isinstance(result, Placement), result
        assert (result.node, result.gpu_index) == expected
    else:
        assert isinstance(result, NoFit)
        assert result.rejected == {expected: len(nodes)} or expected in result.rejected


def test_the_cards_without_the_nominee_fit():
    """The same clusters without the nomination: the pod fits, on the card a nominee would
    have needed (the rows above fail on the old code)."""
    assert isinstance(decided(card_pod(slice_(64)), [mt_node("g1", 1)],
                              [card_pod(slice_(64), priority=10)]), Placement)
    alone = decided(card_pod(slice_(32)), [mt_node("g1", 2)],
                    [holder("g1", 0, 40), card_pod(slice_(64, 8), priority=10)])
    assert alone.gpu_index == "1"


def test_explain_names_the_card_room_a_nominee_holds():
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", [mt_node("g1", 1)])
    cache.apply("pod", "RESET", [card_pod(slice_(64), priority=10, on="g1")])
    p = card_pod(slice_(64))
    with cache.deciding() as state:
        why = explain(p, request_of(p, CONFIG), state, CONFIG, cache.holders(state.nodes),
                      pod_priority(p))
    (g1,) = why.nodes
    assert g1.reason == reasons.INSUFFICIENT_CARD_MEMORY
    assert [c.detail for c in g1.cards] == ["32 of 96 units free, the pod needs 64"]


def test_explain_a_node_held_for_a_nominee_that_does_not_fit_yet():
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", [mt_node("g1", 1)])
    cache.apply("pod", "RESET", [holder("g1", 0, 90, priority=100),
                                 card_pod(slice_(64), priority=10, on="g1")])
    p = card_pod(slice_(8))
    with cache.deciding() as state:
        why = explain(p, request_of(p, CONFIG), state, CONFIG, cache.holders(state.nodes),
                      pod_priority(p))
    assert why.nodes[0].reason == reasons.EXCLUSIVE_CONFLICT
    assert "nominated" in why.nodes[0].detail


def test_the_victim_search_leaves_a_nominee_its_room():
    """kube-scheduler's victim search runs the filters with the nominated pods: evicting the
    low pod frees the card for the nominee of higher priority, not for this preemptor."""
    from webhook.scheduling.preemption import victims_on
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", [mt_node("g1", 1)])
    low = holder("g1", 0, 64, priority=0, name="low")
    cache.apply("pod", "RESET", [low])
    p = card_pod(slice_(64), priority=50)
    with cache.deciding() as state:
        free = victims_on(p, request_of(p, CONFIG), "g1", state, CONFIG,
                          cache.holders(["g1"])["g1"], [])
    assert free == [low["metadata"]["uid"]]
    cache.apply("pod", "ADDED", card_pod(slice_(64), priority=100, on="g1"))
    with cache.deciding() as state:
        held = victims_on(p, request_of(p, CONFIG), "g1", state, CONFIG,
                          cache.holders(["g1"])["g1"], [])
    assert held is None


# The index under watch events
def index_of(cache):
    with cache.deciding() as state:
        return {n: sorted(on) for n, on in state.nominated.on_node.items()}


def test_the_index_follows_the_watch():
    cache = cache_of(TWO)
    n = nominee("n", requests=CPU)
    uid = n["metadata"]["uid"]
    gen = cache.generation
    cache.apply("pod", "ADDED", n)  # set
    assert index_of(cache) == {"n1": [uid]}
    cache.apply("pod", "MODIFIED", nominated(pod("n", None, requests=CPU, priority=10), "n2"))
    assert index_of(cache) == {"n2": [uid]}  # moved
    assert cache.generation > gen  # n1 may have room now
    gen = cache.generation
    cleared = pod("n", None, requests=CPU, priority=10)
    cache.apply("pod", "MODIFIED", cleared)  # cleared
    assert index_of(cache) == {}
    assert cache.generation > gen
    cache.apply("pod", "MODIFIED", n)
    cache.apply("pod", "MODIFIED", nominated(pod("n", "n1", requests=CPU, priority=10), "n1"))
    assert index_of(cache) == {}  # bound: its share counts now, not its nomination
    cache.apply("pod", "DELETED", n)
    cache.apply("pod", "ADDED", nominee("m"))
    cache.apply("pod", "DELETED", nominee("m"))
    assert index_of(cache) == {}  # deleted
    cache.apply("pod", "ADDED", nominee("m"))
    cache.apply("pod", "MODIFIED", {**nominee("m"), "status": {"phase": "Succeeded",
                                                               "nominatedNodeName": "n1"}})
    assert index_of(cache) == {}  # finished
    cache.apply("pod", "ADDED", nominee("m"))
    cache.apply("pod", "RESET", [nominee("k", "n2")])
    assert index_of(cache) == {"n2": [nominee("k")["metadata"]["uid"]]}  # a relist rebuilds it


def test_an_unchanged_nomination_retries_nothing():
    cache = cache_of(TWO, [nominee("n")])
    gen = cache.generation
    cache.apply("pod", "MODIFIED", nominee("n"))
    assert cache.generation == gen


@pytest.mark.parametrize("value", [5, ["n1"], {"name": "n1"}])
def test_a_nomination_of_the_wrong_shape_is_named_and_skipped(value):
    cache = cache_of(TWO, [nominee("ok", "n2")])
    bad = nominee("bad")
    bad["status"]["nominatedNodeName"] = value
    failed = cache.apply("pod", "ADDED", bad)
    assert len(failed) == 1 and "status.nominatedNodeName is not a string" in failed[0].what
    assert failed[0].name == "bad"
    assert index_of(cache) == {"n2": [nominee("ok")["metadata"]["uid"]]}
    failed = cache.apply("pod", "RESET", [bad, nominee("ok", "n2")])
    assert [f.name for f in failed] == ["bad"]
    assert index_of(cache) == {"n2": [nominee("ok")["metadata"]["uid"]]}
