"""The API server's merge of matchLabelKeys / mismatchLabelKeys (1.33 GA) into an affinity
term's labelSelector, as `cards what-if FILE` applies it to a pod of a file (upstream's
applyMatchLabelKeysAndMismatchLabelKeys, the pod strategy's PrepareForCreate)."""

from __future__ import annotations

import copy

import pytest

from tests.harness.schema import valid_pod
from tests.scheduling.rules_support import HOST, affinity, cache_of, node, passing, pod
from webhook.cli.what_if import admitted
from webhook.model.config import Config
from webhook.scheduling.affinity_label_keys import with_label_keys_merged

ANTI, AFF = "podAntiAffinity", "podAffinity"
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def term(selector: dict | None = None, match: list | None = None, mismatch: list | None = None) -> dict:
    t: dict = {"topologyKey": HOST}
    if selector is not None:
        t["labelSelector"] = selector
    if match is not None:
        t["matchLabelKeys"] = match
    if mismatch is not None:
        t["mismatchLabelKeys"] = mismatch
    return t



LABELS = {"app": "web", "rev": "1"}
APP = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize("t, merged", [
    (term(APP, match=["rev"]),
     {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "rev", "operator": "In", "values": ["1"]}]}),
    (term(APP, mismatch=["rev"]),
     {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "rev", "operator": "NotIn", "values": ["1"]}]}),
    (term(APP, match=["rev"], mismatch=["app"]),
     {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "rev", "operator": "In", "values": ["1"]},
                                                          {"key": "app", "operator": "NotIn", "values": ["web"]}]}),
    (term(APP, match=["absent"]), {"matchLabels": {"app": "web"}, "matchExpressions": []}),  # a key the pod lacks
    (term(None, match=["rev"]), None),  # no labelSelector: left alone (it selects nothing)
], ids=["matchLabelKeys: In", "mismatchLabelKeys: NotIn", "both", "a key the pod lacks", "no labelSelector"])
def test_each_required_term_is_merged_as_the_api_server_merges_it(t, merged):
    for kind in (ANTI, AFF):
        p = valid_pod(pod("w", None, LABELS, **affinity(kind, copy.deepcopy(t))))
        (out,) = with_label_keys_merged(p)["spec"]["affinity"][kind][REQ]
        assert out.get("labelSelector") == merged


def test_preferred_terms_are_merged_too_and_the_pod_read_is_left_as_it_was():
    p = valid_pod(pod("w", None, LABELS, affinity={ANTI: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": term(APP, match=["rev"])}]}}))
    before = copy.deepcopy(p)
    out = with_label_keys_merged(p)
    (w,) = out["spec"]["affinity"][ANTI]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert w["podAffinityTerm"]["labelSelector"]["matchExpressions"] == [
        {"key": "rev", "operator": "In", "values": ["1"]}]
    assert p == before


def test_a_pod_without_label_keys_is_the_same_object():
    p = pod("w", None, LABELS, **affinity(ANTI, term(APP)))
    assert with_label_keys_merged(p) is p


NODES = [node("n1"), node("n2"), node("n3")]
BOUND = [pod("r1", "n1", {"app": "web", "rev": "1"}), pod("r2", "n2", {"app": "web", "rev": "2"})]


@pytest.mark.parametrize("t, expected", [
    (term(APP), {"n3"}),  # without the keys: every web pod repels it
    (term(APP, match=["rev"]), {"n2", "n3"}),  # only its own revision's
    (term(APP, mismatch=["rev"]), {"n1", "n3"}),  # only the other revisions'
])
def test_the_merged_pod_is_decided_and_merging_a_stored_pod_again_gives_the_same_answer(t, expected):
    c = cache_of(NODES, BOUND)
    p = valid_pod(pod("w", None, LABELS, **affinity(ANTI, t)))
    stored = with_label_keys_merged(p)
    assert passing(stored, c) == expected
    assert passing(with_label_keys_merged(stored), c) == expected


def test_what_if_merges_the_keys_of_the_pod_of_a_file():
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "labels": LABELS},
           "spec": {"containers": [{"name": "c", "image": "busybox"}],
                    **affinity(ANTI, term(APP, match=["rev"]))}}
    out = admitted(valid_pod(doc), Config())
    assert isinstance(out, dict)
    (t,) = out["spec"]["affinity"][ANTI][REQ]
    assert t["labelSelector"]["matchExpressions"] == [{"key": "rev", "operator": "In", "values": ["1"]}]


@pytest.mark.parametrize("t, field", [
    (term(APP, match="rev"), "matchLabelKeys"),
    (term(APP, mismatch=[1]), "mismatchLabelKeys"),
    (term("app=web", match=["rev"]), "labelSelector"),
    (term({"matchExpressions": "x"}, match=["rev"]), "labelSelector.matchExpressions"),
])
def test_a_term_of_the_wrong_shape_is_an_answer_naming_the_field(t, field):
    doc = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "labels": LABELS},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], **affinity(ANTI, t)}}
    out = admitted(doc, Config())
    assert out == f"the API server would refuse it: spec.affinity.podAntiAffinity.{REQ}[0].{field} " + \
        ("is not a mapping" if field == "labelSelector" else
         "is not a list" if field.endswith("matchExpressions") else "is not a list of label keys")
