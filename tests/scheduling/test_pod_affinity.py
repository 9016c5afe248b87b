"""InterPodAffinity's namespaceSelector (1.24 GA), as kube-scheduler of today applies it: the
namespaces a term selects are its `namespaces` and those whose labels its namespaceSelector
matches; `{}` is every namespace; no selector and no list, the pod's own. Rows are the
situations of upstream's interpodaffinity filtering_test.go."""

from __future__ import annotations

import pytest

from tests.harness.schema import valid_pod
from tests.scheduling.rules_support import (
    HOST,
    ZONE,
    affinity,
    cache_of,
    node,
    passing,
    pod,
    reasons_for,
)
from webhook.scheduling import reasons
from webhook.scheduling.cache import NAMESPACE
from webhook.scheduling.pod_affinity import names_namespace_selector

NODES = [node("n1", "z1"), node("n2", "z1"), node("n3", "z2")]
WEB = {"app": "web"}
# namespaces: a (the incoming pod's, team blue), b (team blue), c (team red), d (no labels)
NAMESPACES = {"a": {"team": "blue"}, "b": {"team": "blue"}, "c": {"team": "red"}, "d": {}}


def namespace(name: str, labels: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def term(key: str = HOST, selector: dict | None = None, ns: list | None = None, **match) -> dict:
    """A required term; `selector`: its namespaceSelector ({} is every namespace)."""
    t: dict = {"labelSelector": {"matchLabels": match}, "topologyKey": key}
    if selector is not None:
        t["namespaceSelector"] = selector
    if ns is not None:
        t["namespaces"] = ns
    return t



def cluster(pods: list, namespaces: dict = NAMESPACES):
    c = cache_of(NODES, pods)
    c.apply(NAMESPACE, "RESET", [namespace(n, labels) for n, labels in namespaces.items()])
    return c


BLUE = {"matchLabels": {"team": "blue"}}
ANTI, AFF = "podAntiAffinity", "podAffinity"

CASES = [
    # the incoming pod's anti-affinity
    ("anti: namespaceSelector selects a labelled namespace's pods", [pod("w1", "n1", WEB, ns="b")],
     pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, app="web"))), {"n2", "n3"}),
    ("anti: namespaceSelector not matching the pod's namespace", [pod("w1", "n1", WEB, ns="c")],
     pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, app="web"))), {"n1", "n2", "n3"}),
    ("anti: empty namespaceSelector {} selects every namespace", [pod("w1", "n1", WEB, ns="d")],
     pod("w2", None, WEB, **affinity(ANTI, term(HOST, {}, app="web"))), {"n2", "n3"}),
    ("anti: namespaceSelector and namespaces, the union",
     [pod("w1", "n1", WEB, ns="b"), pod("w3", "n3", WEB, ns="d")],
     pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, ["d"], app="web"))), {"n2"}),
    ("anti: a selector matching no namespace, no list: not even the pod's own",
     [pod("w1", "n1", WEB, ns="a")],
     pod("w2", None, WEB, **affinity(ANTI, term(HOST, {"matchLabels": {"team": "green"}}, app="web"))),
     {"n1", "n2", "n3"}),
    ("anti: matchExpressions on the namespace's labels", [pod("w1", "n3", WEB, ns="c")],
     pod("w2", None, WEB, **affinity(ANTI, term(ZONE, {"matchExpressions": [
         {"key": "team", "operator": "In", "values": ["red", "green"]}]}, app="web"))), {"n1", "n2"}),
    # the incoming pod's affinity
    ("affinity: the matching pod is in a namespace the selector picks", [pod("db", "n3", {"app": "db"}, ns="b")],
     pod("w", None, WEB, **affinity(AFF, term(ZONE, BLUE, app="db"))), {"n3"}),
    ("affinity: the matching pod's namespace is not selected", [pod("db", "n3", {"app": "db"}, ns="c")],
     pod("w", None, WEB, **affinity(AFF, term(ZONE, BLUE, app="db"))), set()),
    ("affinity: {} and nothing matches anywhere: the first pod of its group goes anywhere", [],
     pod("w", None, WEB, **affinity(AFF, term(ZONE, {}, app="web"))), {"n1", "n2", "n3"}),
    ("affinity: its own namespace not selected: it is no first pod of its group", [],
     pod("w", None, WEB, **affinity(AFF, term(ZONE, {"matchLabels": {"team": "red"}}, app="web"))), set()),
    # the existing pods' anti-affinity against the incoming pod
    ("existing anti: its namespaceSelector matches the incoming pod's namespace",
     [pod("db", "n1", {"app": "db"}, ns="c", **affinity(ANTI, term(ZONE, BLUE, app="web")))],
     pod("w", None, WEB), {"n3"}),
    ("existing anti: its namespaceSelector does not match the incoming pod's namespace",
     [pod("db", "n1", {"app": "db"}, ns="c", **affinity(ANTI, term(ZONE, {"matchLabels": {"team": "red"}},
                                                               app="web")))],
     pod("w", None, WEB), {"n1", "n2", "n3"}),
    ("existing anti: {} matches every namespace",
     [pod("db", "n1", {"app": "db"}, ns="c", **affinity(ANTI, term(HOST, {}, app="web")))],
     pod("w", None, WEB), {"n2", "n3"}),
    ("existing anti: a selector alone does not add the pod's own namespace",
     [pod("db", "n1", {"app": "db"}, ns="a", **affinity(ANTI, term(HOST, {"matchLabels": {"team": "red"}},
                                                               app="web")))],
     pod("w", None, WEB), {"n1", "n2", "n3"}),
]


@pytest.mark.parametrize("name, pods, incoming, expected", CASES, ids=[c[0] for c in CASES])
def test_namespace_selector_of_required_terms(name, pods, incoming, expected):
    for p in [*pods, incoming]:
        valid_pod(p)
    assert passing(incoming, cluster(pods)) == expected


@pytest.mark.parametrize("pods, incoming, reason", [
    ([pod("w1", "n1", WEB, ns="b")], pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, app="web"))),
     reasons.ANTI_AFFINITY_RULES),
    ([pod("db", "n1", {"app": "db"}, ns="c", **affinity(ANTI, term(HOST, BLUE, app="web")))], pod("w", None, WEB),
     reasons.EXISTING_ANTI_AFFINITY),
    ([pod("db", "n2", {"app": "db"}, ns="c")], pod("w", None, WEB, **affinity(AFF, term(HOST, BLUE, app="db"))),
     reasons.AFFINITY_RULES),
])
def test_each_refusal_says_upstreams_reason(pods, incoming, reason):
    assert reasons_for(incoming, cluster(pods))["n1"] == reason


def test_a_namespace_relabelled_changes_the_next_answer():
    """No answer is kept per term: the namespace's new labels decide the next decision, for
    the incoming pod's terms and for the existing pods' terms alike."""
    incoming = pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, app="web")))
    c = cluster([pod("w1", "n1", WEB, ns="d"),
                 pod("db", "n3", {"app": "db"}, ns="c", **affinity(ANTI, term(ZONE, BLUE, app="web")))])
    assert passing(incoming, c) == {"n1", "n2"}  # db's term picks a (blue): not z2
    before = c.generation
    c.apply(NAMESPACE, "MODIFIED", namespace("d", {"team": "blue"}))  # d's pods now selected
    assert c.generation > before  # the pods that did not fit are retried
    assert passing(incoming, c) == {"n2"}
    c.apply(NAMESPACE, "MODIFIED", namespace("a", {"team": "red"}))  # the incoming pod's own
    assert passing(incoming, c) == {"n2", "n3"}  # db's term picks a no more
    c.apply(NAMESPACE, "DELETED", namespace("d", {}))
    assert passing(incoming, c) == {"n1", "n2", "n3"}


def test_a_relabelling_that_changes_nothing_retries_nothing():
    c = cluster([])
    before = c.generation
    c.apply(NAMESPACE, "MODIFIED", namespace("b", {"team": "blue"}))
    assert c.generation == before


def test_a_namespace_of_the_wrong_shape_is_told_of_by_name_and_the_others_apply():
    c = cache_of(NODES, [pod("w1", "n1", WEB, ns="b")])
    bad = {"metadata": {"name": "bad", "labels": ["team"]}}
    failed = c.apply(NAMESPACE, "RESET", [bad, namespace("b", {"team": "blue"})])
    assert [(e.kind, e.name) for e in failed] == [(NAMESPACE, "bad")]
    assert "metadata.labels" in str(failed[0].error)
    incoming = pod("w2", None, WEB, **affinity(ANTI, term(HOST, BLUE, app="web")))
    assert passing(incoming, c) == {"n2", "n3"}
    (err,) = c.apply(NAMESPACE, "MODIFIED", {"metadata": {"name": "b", "labels": {"team": 1}}})
    assert "metadata.labels" in str(err.error)
    assert passing(incoming, c) == {"n2", "n3"}  # b as it was


def test_an_unreadable_namespace_selector_selects_no_namespace():
    """The API server validates selectors, so that is a pod read before validation: as an
    unreadable labelSelector, it matches nothing; the term's list still counts."""
    pods = [pod("w1", "n1", WEB, ns="b"), pod("w3", "n3", WEB, ns="d")]
    incoming = pod("w2", None, WEB, **affinity(ANTI, term(HOST, "team=blue", ["d"], app="web")))
    assert passing(incoming, cluster(pods)) == {"n1", "n2"}


def test_terms_without_a_namespace_selector_are_read_as_before():
    """The held term of a bound pod without the field is the 1.20 term: one copy, no selector."""
    from webhook.scheduling.pod_facts import affinity_terms
    p = pod("w", "n1", WEB, **affinity(ANTI, term(HOST, app="web")))
    (t,) = affinity_terms(p, ANTI)
    assert t.namespace_selector is None and t.namespaces == frozenset({"a"})
    (s,) = affinity_terms(valid_pod(pod("w", "n1", WEB, **affinity(ANTI, term(HOST, {}, app="web")))), ANTI)
    assert s.namespaces == frozenset() and s.namespace_selector is not None


@pytest.mark.parametrize("p, names", [
    (pod("w", None, WEB), False),
    (pod("w", None, WEB, **affinity(ANTI, term(HOST, app="web"))), False),
    (pod("w", None, WEB, **affinity(ANTI, term(HOST, {}, app="web"))), True),
    (pod("w", None, WEB, **affinity(AFF, term(HOST, BLUE, app="web"))), True),
    ({"spec": {"affinity": "garbled"}}, False),
])
def test_which_pods_read_the_namespaces_labels(p, names):
    assert names_namespace_selector(p) is names
