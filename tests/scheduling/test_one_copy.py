"""The tables that keep one copy of what many pods hold (issue 46, finding 6): an entry goes
with the last pod the cache counts that holds it, so a churn of pods with big anti-affinity
terms leaves the memory where it started."""

from __future__ import annotations

import copy
import gc
import tracemalloc

from tests.builders import mt_node, sched_pod, slice_
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling import cycle_state, request
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.cycle_state import cycle_of
from webhook.scheduling.decide import Placement, place
from webhook.scheduling.one_copy import VALUES
from webhook.scheduling.pod_facts import LABEL_SETS, facts_of
from webhook.scheduling.request import request_of
from webhook.scheduling.shares import share_of
from webhook.scheduling.state import ClusterState

MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)
HOST = "kubernetes.io/hostname"
NODES = 200


def cache_of(nodes: int) -> SchedulerCache:
    c = SchedulerCache(MT)
    c.apply("node", "RESET", [mt_node(f"n{i}", 2, 96) for i in range(nodes)])
    c.apply("pod", "RESET", [])
    return c


def big_anti_affinity(i: int, values: int = 40_000) -> dict:
    """A pod whose anti-affinity term is about 1 MiB of JSON (its own values, so no other pod
    shares them), labelled as its own."""
    term = {"labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": [f"app-{i}-{j:06d}" for j in range(values)]}]},
        "topologyKey": HOST}
    p = sched_pod(slice_(2), name=f"big-{i}", namespace=f"ns-{i}",
                  spec={"affinity": {"podAntiAffinity": {
                      "requiredDuringSchedulingIgnoredDuringExecution": [term]}}})
    p["metadata"]["labels"] = {"app": f"app-{i}-000000", "unique": f"u{i}"}
    return p


def churn(c: SchedulerCache, p: dict) -> Placement:
    """One pod through the allocator's steps: decided while pending, seen bound, deleted."""
    ask = request_of(p, CONFIG)
    cycle = cycle_of(p, ask, CONFIG)
    placement = c.read(lambda state: place(p, ask, state, CONFIG, cycle))
    assert isinstance(placement, Placement)
    b = copy.deepcopy(p)
    b["spec"]["nodeName"] = placement.node
    b["status"]["phase"] = "Running"
    c.apply("pod", "ADDED", b)
    c.apply("pod", "DELETED", b)
    return placement


def test_memory_after_a_churn_of_big_terms_returns_to_the_start():
    gc.collect()
    tracemalloc.start()
    try:
        c = cache_of(NODES)
        for i in range(2):  # what every first decision makes once (the node policy's lists)
            churn(c, big_anti_affinity(1000 + i, values=10))
        gc.collect()
        start = tracemalloc.get_traced_memory()[0]
        for i in range(8):
            churn(c, big_anti_affinity(i))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # before: some 5 MiB kept per pod (its term and labels in the interning tables)
    assert after <= start * 1.10, f"{start / 2**20:.2f} MiB -> {after / 2**20:.2f} MiB"


def test_the_tables_hold_nothing_of_a_pod_once_it_is_deleted():
    c = cache_of(3)
    p = big_anti_affinity(7, values=100)
    facts = facts_of(p)
    labels_key = tuple(sorted(p["metadata"]["labels"].items()))
    uid = p["metadata"]["uid"]
    ask = request_of(p, CONFIG)
    cycle_of(p, ask, CONFIG)
    placement = c.read(lambda state: place(p, ask, state, CONFIG))
    b = copy.deepcopy(p)
    b["spec"]["nodeName"] = placement.node
    c.apply("pod", "ADDED", b)
    assert facts.anti_affinity in VALUES and labels_key in LABEL_SETS  # held while it runs
    assert c.read(lambda s: s.pods.by_label) == {}  # no selector has asked about ns-7
    c.apply("pod", "DELETED", b)
    assert facts.anti_affinity not in VALUES and labels_key not in LABEL_SETS
    assert uid not in request._ASKED and uid not in cycle_state._RULES


def test_an_answer_kept_for_replicas_goes_with_the_last_of_them():
    c = cache_of(3)
    replicas = [sched_pod(slice_(2, name="main"), name=f"web-{i}") for i in range(2)]
    asks = [request_of(p, CONFIG) for p in replicas]
    assert asks[0] is asks[1]  # one reading for both
    c.apply("pod", "DELETED", replicas[0])
    assert request_of(copy.deepcopy(replicas[1]), CONFIG) is asks[0]  # one still waits
    c.apply("pod", "DELETED", replicas[1])
    assert request_of(copy.deepcopy(replicas[1]), CONFIG) is not asks[0]  # read anew


def test_a_state_dropped_lets_go_of_what_its_shares_held():
    state = ClusterState(MT)
    state.set_node(mt_node("n0", 2, 96))
    p = sched_pod(slice_(2), node="n0")
    p["metadata"]["labels"] = {"only-here": "dropped-state"}
    state.add(share_of(p))
    key = (("only-here", "dropped-state"),)
    assert key in LABEL_SETS
    del state
    gc.collect()
    assert key not in LABEL_SETS


def test_the_label_index_is_made_per_namespace_and_goes_with_its_pods():
    c = cache_of(3)
    on = [sched_pod(slice_(2), name=f"w{i}", namespace=ns, node="n0")
          for i, ns in enumerate(("a", "a", "b"))]
    for p in on:
        p["metadata"]["labels"] = {"app": "web"}
        c.apply("pod", "ADDED", p)
    anti = sched_pod(slice_(2), namespace="a", spec={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}]}}})
    got = c.read(lambda state: place(anti, request_of(anti, CONFIG), state, CONFIG))
    assert isinstance(got, Placement) and got.node != "n0"
    # the question read namespace a's pods only, and keeps their index
    assert c.read(lambda s: {ns: {k: sorted(v) for k, v in keys.items()}
                             for ns, keys in s.pods.by_label.items()}) == {"a": {"app": ["web"]}}
    for p in on:
        c.apply("pod", "DELETED", p)
    assert c.read(lambda s: s.pods.by_label) == {}
