"""kube-scheduler 1.20's filters as the allocator's core applies them
(webhook/scheduling/feasible.py and the modules it runs): tables of small clusters, each a pod
and the nodes that must pass; the reasons' wording is kube-scheduler's."""

import pytest

from tests.scheduling.rules_support import (
    HOST,
    ZONE,
    affinity,
    cache_of,
    node,
    passing,
    pod,
    reasons_for,
    term,
)

THREE = [node("n1", "z1"), node("n2", "z1"), node("n3", "z2")]
WEB = {"app": "web"}


def spread(key=ZONE, skew=1, when="DoNotSchedule", **match):
    return {"topologySpreadConstraints": [{"maxSkew": skew, "topologyKey": key,
                                           "whenUnsatisfiable": when,
                                           "labelSelector": {"matchLabels": match}}]}


def port(p, ip=None, proto=None):
    out = {"containerPort": p, "hostPort": p}
    if ip:
        out["hostIP"] = ip
    if proto:
        out["protocol"] = proto
    return out


@pytest.mark.parametrize("case, placed, new, fits", [
    # InterPodAffinity: the pod's anti-affinity
    ("anti by zone", [pod("w1", "n1", WEB)],
     pod("w2", None, WEB, **affinity("podAntiAffinity", term(ZONE, app="web"))), {"n3"}),
    ("anti by host", [pod("w1", "n1", WEB)],
     pod("w2", None, WEB, **affinity("podAntiAffinity", term(HOST, app="web"))), {"n2", "n3"}),
    ("anti, other namespace not selected", [pod("w1", "n1", WEB, ns="b")],
     pod("w2", None, WEB, **affinity("podAntiAffinity", term(HOST, app="web"))), {"n1", "n2", "n3"}),
    ("anti naming the namespace", [pod("w1", "n1", WEB, ns="b")],
     pod("w2", None, WEB, **affinity("podAntiAffinity", term(HOST, ns=["b"], app="web"))),
     {"n2", "n3"}),
    ("anti: a node without the key is not refused", [pod("w1", "n1", WEB)],
     pod("w2", None, WEB, **affinity("podAntiAffinity", term("rack", app="web"))), {"n1", "n2", "n3"}),
    # existing pods' anti-affinity against the new pod
    ("existing anti", [pod("db", "n1", {"app": "db"}, **affinity("podAntiAffinity", term(ZONE, app="web")))],
     pod("w", None, WEB), {"n3"}),
    ("existing anti, not selecting", [pod("db", "n1", {"app": "db"},
                                          **affinity("podAntiAffinity", term(ZONE, app="x")))],
     pod("w", None, WEB), {"n1", "n2", "n3"}),
    # the pod's affinity
    ("affinity by zone", [pod("db", "n3", {"app": "db"})],
     pod("w", None, WEB, **affinity("podAffinity", term(ZONE, app="db"))), {"n3"}),
    ("affinity: first pod of its group may go anywhere with the key", [],
     pod("w", None, WEB, **affinity("podAffinity", term(ZONE, app="web"))), {"n1", "n2", "n3"}),
    ("affinity: no match anywhere, not self-matching", [],
     pod("w", None, WEB, **affinity("podAffinity", term(ZONE, app="db"))), set()),
    ("affinity: a node without the key is refused", [pod("db", "n1", {"app": "db"})],
     pod("w", None, WEB, **affinity("podAffinity", term("rack", app="db"))), set()),
    ("affinity: a pod must match all terms to count", [pod("db", "n1", {"app": "db"})],
     pod("w", None, WEB, **affinity("podAffinity", term(ZONE, app="db"), term(HOST, tier="x"))),
     set()),
    # PodTopologySpread
    ("spread by zone, skew 1", [pod("w1", "n1", WEB)], pod("w2", None, WEB, **spread(app="web")),
     {"n3"}),
    ("spread by zone, skew 2", [pod("w1", "n1", WEB)], pod("w2", None, WEB, **spread(skew=2, app="web")),
     {"n1", "n2", "n3"}),
    ("spread: ScheduleAnyway is no filter", [pod("w1", "n1", WEB)],
     pod("w2", None, WEB, **spread(when="ScheduleAnyway", app="web")), {"n1", "n2", "n3"}),
    ("spread: terminating pods are not counted",
     [{**pod("w1", "n1", WEB), "metadata": {**pod("w1", "n1", WEB)["metadata"],
                                             "deletionTimestamp": "2026-01-01T00:00:00Z"}}],
     pod("w2", None, WEB, **spread(app="web")), {"n1", "n2", "n3"}),
    ("spread: other namespaces are not counted", [pod("w1", "n1", WEB, ns="b")],
     pod("w2", None, WEB, **spread(app="web")), {"n1", "n2", "n3"}),
    ("spread: the pod not matching itself", [pod("w1", "n1", WEB)],
     pod("x", None, {"app": "x"}, **spread(app="web")), {"n1", "n2", "n3"}),
    ("spread: only zones of nodes the selector accepts",
     [pod("w1", "n1", WEB)],
     pod("w2", None, WEB, nodeSelector={HOST: "n1"}, **spread(app="web")), {"n1"}),
    # NodePorts
    ("port in use", [pod("p", "n1", ports=[port(80)])], pod("q", ports=[port(80)]), {"n2", "n3"}),
    ("port, other protocol", [pod("p", "n1", ports=[port(80)])],
     pod("q", ports=[port(80, proto="UDP")]), {"n1", "n2", "n3"}),
    ("port, two addresses", [pod("p", "n1", ports=[port(80, "10.0.0.1")])],
     pod("q", ports=[port(80, "10.0.0.2")]), {"n1", "n2", "n3"}),
    ("port, any address against one", [pod("p", "n1", ports=[port(80, "10.0.0.1")])],
     pod("q", ports=[port(80)]), {"n2", "n3"}),
    ("port, one address against any", [pod("p", "n1", ports=[port(80)])],
     pod("q", ports=[port(80, "10.0.0.1")]), {"n2", "n3"}),
])
def test_filters_table(case, placed, new, fits):
    assert passing(new, cache_of(THREE, placed)) == fits, case


def test_a_node_without_the_spread_key_is_refused_for_the_missing_label():
    c = cache_of([node("n1", "z1"), node("n0", None)])
    got = reasons_for(pod("w", None, WEB, **spread(app="web")), c)
    assert got == {"n1": None,
                   "n0": "node(s) didn't match pod topology spread constraints (missing required label)"}


@pytest.mark.parametrize("case, placed, new, reason", [
    ("anti", [pod("w1", "n1", WEB)], pod("w2", None, WEB, **affinity("podAntiAffinity", term(HOST, app="web"))),
     "node(s) didn't match pod anti-affinity rules"),
    ("existing anti", [pod("d", "n1", {"app": "d"}, **affinity("podAntiAffinity", term(HOST, app="web")))],
     pod("w", None, WEB), "node(s) didn't satisfy existing pods anti-affinity rules"),
    ("affinity", [pod("d", "n2", {"app": "d"})], pod("w", None, WEB, **affinity("podAffinity", term(HOST, app="d"))),
     "node(s) didn't match pod affinity rules"),
    ("spread", [pod("w1", "n1", WEB)], pod("w2", None, WEB, **spread(HOST, app="web")),
     "node(s) didn't match pod topology spread constraints"),
    ("ports", [pod("p", "n1", ports=[port(80)])], pod("q", ports=[port(80)]),
     "node(s) didn't have free ports for the requested pod ports"),
    # ports come before resources, as in kube-scheduler's order
    ("ports before cpu", [pod("p", "n1", ports=[port(80)])], pod("q", requests={"cpu": "64"}, ports=[port(80)]),
     "node(s) didn't have free ports for the requested pod ports"),
])
def test_reasons_on_n1_use_kube_schedulers_words(case, placed, new, reason):
    assert reasons_for(new, cache_of(THREE, placed))["n1"] == reason, case


@pytest.mark.parametrize("requests, allocatable, placed, reason", [
    ({"example.com/rdma": "1"}, {}, [], "Insufficient example.com/rdma"),
    ({"example.com/rdma": "1"}, {"example.com/rdma": "1"}, [], None),
    ({"example.com/rdma": "1"}, {"example.com/rdma": "1"}, [{"example.com/rdma": "1"}],
     "Insufficient example.com/rdma"),
    ({"ephemeral-storage": "2Gi"}, {"ephemeral-storage": "1Gi"}, [], "Insufficient ephemeral-storage"),
    ({"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "2Gi"}, [{"ephemeral-storage": "1Gi"}], None),
    ({"hugepages-2Mi": "4Mi"}, {"hugepages-2Mi": "2Mi"}, [], "Insufficient hugepages-2Mi"),
    ({"cpu": "3"}, {}, [{"cpu": "2"}], "Insufficient cpu"),
    ({"memory": "5Gi"}, {}, [{"memory": "4Gi"}], "Insufficient memory"),
    # the Mthreads resources are the cards' to count, not this filter's
    ({"mthreads.com/vgpu": "1"}, {}, [], None),
])
def test_node_resources_fit_counts_every_resource(requests, allocatable, placed, reason):
    nodes = [node("n1", allocatable=allocatable)]
    bound = [pod(f"b{i}", "n1", requests=r) for i, r in enumerate(placed)]
    assert reasons_for(pod("q", requests=requests), cache_of(nodes, bound))["n1"] == reason


def test_too_many_pods_comes_first():
    c = cache_of([node("n1", pods="1")], [pod("b", "n1")])
    assert reasons_for(pod("q", requests={"cpu": "64"}), c)["n1"] == "Too many pods"


def test_init_containers_and_overhead_count_for_other_resources():
    p = pod("q", requests={"example.com/rdma": "1"},
            initContainers=[{"name": "i", "resources": {"requests": {"example.com/rdma": "3"}}}],
            overhead={"example.com/rdma": "1"})
    assert passing(p, cache_of([node("n1", allocatable={"example.com/rdma": "4"})])) == {"n1"}
    assert passing(p, cache_of([node("n1", allocatable={"example.com/rdma": "3"})])) == set()


@pytest.mark.parametrize("mine, theirs, conflict", [
    ({"gcePersistentDisk": {"pdName": "d"}}, {"gcePersistentDisk": {"pdName": "d"}}, True),
    ({"gcePersistentDisk": {"pdName": "d", "readOnly": True}},
     {"gcePersistentDisk": {"pdName": "d", "readOnly": True}}, False),
    ({"gcePersistentDisk": {"pdName": "d"}}, {"gcePersistentDisk": {"pdName": "e"}}, False),
    ({"awsElasticBlockStore": {"volumeID": "v", "readOnly": True}},
     {"awsElasticBlockStore": {"volumeID": "v", "readOnly": True}}, True),
    ({"iscsi": {"iqn": "q", "targetPortal": "t", "lun": 0}},
     {"iscsi": {"iqn": "q", "targetPortal": "t", "lun": 0}}, True),
    ({"rbd": {"monitors": ["m1", "m2"], "image": "i"}}, {"rbd": {"monitors": ["m2"], "image": "i"}}, True),
    ({"rbd": {"monitors": ["m1"], "image": "i"}}, {"rbd": {"monitors": ["m2"], "image": "i"}}, False),
])
def test_volume_restrictions_inline_disks(mine, theirs, conflict):
    c = cache_of([node("n1")], [pod("b", "n1", volumes=[{"name": "v", **theirs}])])
    got = reasons_for(pod("q", volumes=[{"name": "v", **mine}]), c)["n1"]
    assert got == ("node(s) had no available disk" if conflict else None)


def test_a_placed_share_is_seen_by_the_next_decision_before_the_watch_shows_it():
    from webhook.model.config import Config
    from webhook.scheduling.decide import Placement, place
    from webhook.scheduling.request import request_of
    c = cache_of(THREE)
    anti = affinity("podAntiAffinity", term(HOST, app="web"))
    chosen = []
    for i in range(4):
        p = pod(f"w{i}", None, WEB, **anti)
        result = c.read(lambda state: place(p, request_of(p, Config()), state, Config()))
        if isinstance(result, Placement):
            c.assume(result.share, "a", f"w{i}")
            chosen.append(result.node)
        else:
            assert "3 node(s) didn't match pod anti-affinity rules" in result.message
    assert sorted(chosen) == ["n1", "n2", "n3"]


def test_the_index_forgets_a_pod_that_left():
    c = cache_of(THREE, [pod("w1", "n1", WEB, ports=[port(80)],
                             **affinity("podAntiAffinity", term(HOST, app="x")))])
    c.apply("pod", "DELETED", pod("w1", "n1", WEB))
    state = c.read(lambda s: s)
    assert not state.pods.on_node and not state.pods.in_namespace
    assert not state.pods.ports and not state.pods.anti_affinity


def test_the_label_index_made_by_a_first_question_follows_later_pods():
    c = cache_of(THREE)
    anti = pod("q", None, WEB, **affinity("podAntiAffinity", term(HOST, app="web")))
    assert passing(anti, c) == {"n1", "n2", "n3"}  # the question that makes the index of "app"
    c.apply("pod", "ADDED", pod("w1", "n1", WEB))
    c.apply("pod", "ADDED", pod("w2", "n2", {"app": "web", "tier": "x"}))
    c.apply("pod", "ADDED", pod("d", "n3", {"app": "db"}))
    assert passing(anti, c) == {"n3"}
    c.apply("pod", "DELETED", pod("w2", "n2", WEB))
    assert passing(anti, c) == {"n2", "n3"}
    c.apply("pod", "MODIFIED", pod("w1", "n1", {"app": "api"}))  # relabelled: no longer selected
    assert passing(anti, c) == {"n1", "n2", "n3"}
    assert c.read(lambda s: s.pods.by_label["a"]["app"]) == {
        "api": {"uid-a-w1": c.share("uid-a-w1")}, "db": {"uid-a-d": c.share("uid-a-d")}}
