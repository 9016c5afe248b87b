"""kube-scheduler's PodTopologySpread filter of today (webhook/scheduling/topology_spread.py):
`minDomains`, the node inclusion policies, `matchLabelKeys` in both stored forms, and the
counting of 1.24 (only pods on the nodes the policies include count).

The first table is upstream's own (pkg/scheduler/framework/plugins/podtopologyspread/
filtering_test.go, TestSingleConstraint and TestMultipleConstraints): the plugin alone, so a
node another filter refuses (NodeAffinity, TaintToleration) may still pass it, as there. The
second is the same rules through every filter, as every deciding path reads them
(feasible.node_reasons). Each incoming pod is one 1.37's strict schema takes."""

from __future__ import annotations

import pytest

from tests.builders import spread_constraint
from tests.harness.schema import valid_at
from tests.scheduling.rules_support import cache_of, node, pod, reasons_for
from webhook.scheduling import reasons
from webhook.scheduling.feasible import node_checks
from webhook.scheduling.label_selector import selector_of
from webhook.scheduling.topology_spread import constraints_of, spread_reason, with_label_keys

FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
TAINTS = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]


def n(name: str, taints: list | None = None, **labels: str) -> dict:
    return node(name, None, labels=labels, spec={"taints": taints} if taints else {})


FOUR = [n("node-a", zone="zone1", node="node-a"), n("node-b", zone="zone1", node="node-b"),
        n("node-x", zone="zone2", node="node-x"), n("node-y", zone="zone2", node="node-y")]
BY_NODE = [n("node-a", node="node-a"), n("node-b", node="node-b"), n("node-c", node="node-c")]
# node-y lacks the label the pod's nodeSelector or node affinity asks for (foo)
FOO_BUT_Y = [n("node-a", node="node-a", foo=""), n("node-b", node="node-b", foo=""),
             n("node-x", node="node-x", foo=""), n("node-y", node="node-y")]
Y_TAINTED = [n("node-a", node="node-a", foo=""), n("node-b", node="node-b", foo=""),
             n("node-x", node="node-x", foo=""), n("node-y", TAINTS, node="node-y")]
ZONES_FOO_BUT_Y = [n("node-a", zone="zone1", node="node-a", foo=""),
                   n("node-b", zone="zone1", node="node-b", foo=""),
                   n("node-x", zone="zone2", node="node-x", foo=""),
                   n("node-y", zone="zone2", node="node-y")]
ZONES_Y_TAINTED = [*ZONES_FOO_BUT_Y[:3], n("node-y", TAINTS, zone="zone2", node="node-y")]
_made = iter(range(10**6))


def on(*counts: tuple[str, int], labels: dict | None = None, terminating: bool = False) -> list:
    """`count` pods labelled foo (or `labels`) on each node."""
    out = []
    for where, count in counts:
        for _ in range(count):
            p = pod(f"e{next(_made)}", where, labels if labels is not None else {"foo": ""})
            if terminating:
                p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            out.append(p)
    return out


def incoming(*constraints: dict, labels: dict | None = None, **spec) -> dict:
    p = pod("p", None, labels if labels is not None else {"foo": ""},
            topologySpreadConstraints=list(constraints), **spec)
    return valid_at({"apiVersion": "v1", "kind": "Pod", **p})


def affinity(key: str, operator: str, values: list[str]) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": operator, "values": values}]}]}}}}


def zone(skew=1, selector=FOO, **kw) -> dict:
    return spread_constraint(skew, "zone", selector, **kw)


def by_node(skew=1, selector=FOO, **kw) -> dict:
    return spread_constraint(skew, "node", selector, **kw)


def plugin_answers(p: dict, nodes: list, pods: list) -> dict[str, str | None]:
    """The spread filter alone on each node (upstream's tables run the plugin alone)."""
    def read(state):
        checks = node_checks(p, state)
        assert checks.refusal is None, checks.refusal
        return {name: spread_reason(checks.spread, state.labels[name]) for name in state.nodes}
    return cache_of(nodes, pods).read(read)


MISSING, REFUSED = reasons.SPREAD_MISSING_LABEL, reasons.SPREAD


@pytest.mark.parametrize("case, nodes, existing, new, fits, missing", [
    ("pods spread across zones as 3/3, all nodes fit", FOUR,
     on(("node-a", 2), ("node-b", 1), ("node-y", 3)), incoming(zone()),
     {"node-a", "node-b", "node-x", "node-y"}, ()),
    ("pods spread across nodes as 2/1/0/3, only node-x fits", FOUR,
     on(("node-a", 2), ("node-b", 1), ("node-y", 3)), incoming(by_node()), {"node-x"}, ()),
    ("pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit", FOUR,
     on(("node-a", 2), ("node-b", 1), ("node-y", 3)), incoming(by_node(2)), {"node-b", "node-x"}, ()),
    ("incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits", FOUR,
     on(("node-a", 2), ("node-b", 1), ("node-y", 3)),
     incoming(by_node(), **affinity("node", "In", ["node-a", "node-y"])),
     {"node-a", "node-b", "node-x"}, ()),
    ("terminating Pods should be excluded", [n("node-a", node="node-a"), n("node-b", node="node-b")],
     on(("node-a", 1), terminating=True) + on(("node-b", 1)), incoming(by_node()), {"node-a"}, ()),
    # the 1.24 rule: node-b's pods do not count (1.20 counted them in zone1: node-a refused)
    ("incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits", FOUR,
     on(("node-b", 2), ("node-y", 1)), incoming(zone(), **affinity("node", "NotIn", ["node-b"])),
     {"node-a", "node-b"}, ()),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, "
     "then the third node fits", BY_NODE, on(("node-a", 2), ("node-b", 2), ("node-c", 1)),
     incoming(by_node(2, min_domains=4)), {"node-c"}, ()),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, "
     "then the all nodes fit", BY_NODE, on(("node-a", 2), ("node-b", 2), ("node-c", 1)),
     incoming(by_node(2, min_domains=2)), {"node-a", "node-b", "node-c"}, ()),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then "
     "the third and fourth nodes fit", FOUR, on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(zone(2, min_domains=3)), {"node-x", "node-y"}, ()),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then "
     "the all nodes fit", FOUR, on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(zone(2, min_domains=1)), {"node-a", "node-b", "node-x", "node-y"}, ()),
    ("NodeAffinityPolicy honored with labelSelectors", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)), incoming(by_node(), nodeSelector={"foo": ""}),
     {"node-x", "node-y"}, ()),
    ("NodeAffinityPolicy ignored with labelSelectors", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(by_node(affinity_policy="Ignore"), nodeSelector={"foo": ""}), {"node-x"}, ()),
    ("NodeAffinityPolicy honored with nodeAffinity", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(by_node(), **affinity("foo", "In", [""])), {"node-x", "node-y"}, ()),
    ("NodeAffinityPolicy ignored with nodeAffinity", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(by_node(affinity_policy="Ignore"), **affinity("foo", "In", [""])), {"node-x"}, ()),
    ("NodeTaintsPolicy honored", Y_TAINTED, on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(by_node(taints_policy="Honor")), {"node-x", "node-y"}, ()),
    ("NodeTaintsPolicy ignored", Y_TAINTED, on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(by_node()), {"node-x"}, ()),
    ("two Constraints on zone and node, spreads = [3/3, 2/1/0/3]", FOUR,
     on(("node-a", 2), ("node-b", 1), ("node-y", 3)), incoming(zone(), by_node()), {"node-x"}, ()),
    ("two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
     [*FOUR[:2], n("node-x", zone="zone2"), FOUR[3]], on(("node-a", 1), ("node-y", 1)),
     incoming(zone(), by_node()), {"node-b"}, {"node-x"}),
    # the 1.24 rule across constraints: node-x lacks the key `node`, so its pods count for no
    # zone (1.20 counted them in zone2: node-y refused, node-b fit)
    ("two Constraints, the pods of a node without the key 'node' count nowhere",
     [*FOUR[:2], n("node-x", zone="zone2"), FOUR[3]], on(("node-a", 1), ("node-x", 2)),
     incoming(zone(), by_node()), {"node-y"}, {"node-x"}),
    ("two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore", ZONES_FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(zone(), by_node(affinity_policy="Ignore"), nodeSelector={"foo": ""}), {"node-x"}, ()),
    ("two node inclusion Constraints, zone: honor/honor, node: honor/ignore", ZONES_Y_TAINTED,
     on(("node-a", 1), ("node-b", 1), ("node-y", 1)),
     incoming(zone(taints_policy="Honor"), by_node()), {"node-x"}, ()),
])
def test_upstreams_situations(case, nodes, existing, new, fits, missing):
    got = plugin_answers(new, nodes, existing)
    want = {name: None if name in fits else MISSING if name in missing else REFUSED for name in got}
    assert got == want, case


# matchLabelKeys: the pods of the pod's own revision (bar=a) are 0 in zone1 and 1 in zone2,
# of every revision 2 and 1.
REVISIONS = on(("node-a", 1), ("node-b", 1), labels={"foo": "a", "bar": "b"}) + \
    on(("node-y", 1), labels={"foo": "a", "bar": "a"})
ONE_REVISION, EVERY_REVISION = {"node-a", "node-b"}, {"node-x", "node-y"}
FOO_BAR_A = {"matchExpressions": [*FOO["matchExpressions"],
                                  {"key": "bar", "operator": "In", "values": ["a"]}]}
BAR_A = {"matchExpressions": [{"key": "bar", "operator": "In", "values": ["a"]}]}


@pytest.mark.parametrize("case, constraint, labels, fits", [
    ("without matchLabelKeys every revision counts", zone(), {"foo": "a", "bar": "a"},
     EVERY_REVISION),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty (before 1.34)",
     zone(label_keys=["bar"]), {"foo": "a", "bar": "a"}, ONE_REVISION),
    ("the same, merged into labelSelector by the API server (1.34 on)",
     zone(selector=FOO_BAR_A, label_keys=["bar"]), {"foo": "a", "bar": "a"}, ONE_REVISION),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector is empty (before 1.34)",
     zone(selector={}, label_keys=["bar"]), {"foo": "a", "bar": "a"}, ONE_REVISION),
    ("the same, merged by the API server (1.34 on)",
     zone(selector=BAR_A, label_keys=["bar"]), {"foo": "a", "bar": "a"}, ONE_REVISION),
    ("a key the pod does not carry adds nothing", zone(label_keys=["bar"]), {"foo": "a"},
     EVERY_REVISION),
])
def test_match_label_keys_in_both_stored_forms(case, constraint, labels, fits):
    got = plugin_answers(incoming(constraint, labels=labels), FOUR, REVISIONS)
    assert {name for name, r in got.items() if r is None} == fits, case


@pytest.mark.parametrize("selector", [FOO, {}, {"matchLabels": {"foo": "a"}}, None])
def test_a_selector_merged_twice_selects_the_same_pods(selector):
    labels = {"foo": "a", "bar": "a"}
    once = with_label_keys(selector_of(selector), ["bar"], labels)
    twice = with_label_keys(once, ["bar"], labels)
    for other in ({"foo": "a", "bar": "a"}, {"foo": "a", "bar": "b"}, {"bar": "a"}, {}):
        assert once.matches(other) == twice.matches(other), (selector, other)
    assert once.matches(labels) == (selector is not None)  # no selector matches nothing, merged too


def test_without_the_newer_fields_the_constraint_is_as_before():
    (c,) = constraints_of(incoming(zone()))
    assert (c.min_domains, c.honor_affinity, c.honor_taints) == (1, True, False)
    assert constraints_of(incoming(zone(when="ScheduleAnyway"))) == ()


# Every filter, as the allocator, the extender's filter, `cards explain` and `cards what-if` read
# them: a node another filter refuses says that filter's reason.
@pytest.mark.parametrize("case, nodes, existing, new, want", [
    ("the 1.24 rule: pods on a node the pod's affinity refuses do not count", FOUR,
     on(("node-b", 2), ("node-y", 1)), incoming(zone(), **affinity("node", "NotIn", ["node-b"])),
     {"node-a": None, "node-b": reasons.AFFINITY, "node-x": REFUSED, "node-y": REFUSED}),
    ("minDomains above the domains: the global minimum is 0", BY_NODE,
     on(("node-a", 2), ("node-b", 2), ("node-c", 1)), incoming(by_node(2, min_domains=4)),
     {"node-a": REFUSED, "node-b": REFUSED, "node-c": None}),
    ("nodeAffinityPolicy Ignore: a domain the pod may not go to is the emptiest", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-x", 1)),
     incoming(by_node(affinity_policy="Ignore"), nodeSelector={"foo": ""}),
     {"node-a": REFUSED, "node-b": REFUSED, "node-x": REFUSED, "node-y": reasons.AFFINITY}),
    ("nodeAffinityPolicy Honor: it is no domain", FOO_BUT_Y,
     on(("node-a", 1), ("node-b", 1), ("node-x", 1)), incoming(by_node(), nodeSelector={"foo": ""}),
     {"node-a": None, "node-b": None, "node-x": None, "node-y": reasons.AFFINITY}),
    ("nodeTaintsPolicy Honor: an untolerated taint leaves the node out", Y_TAINTED,
     on(("node-a", 1), ("node-b", 1), ("node-x", 1)), incoming(by_node(taints_policy="Honor")),
     {"node-a": None, "node-b": None, "node-x": None, "node-y": reasons.TAINTED}),
    ("nodeTaintsPolicy Ignore: it is the emptiest domain", Y_TAINTED,
     on(("node-a", 1), ("node-b", 1), ("node-x", 1)), incoming(by_node()),
     {"node-a": REFUSED, "node-b": REFUSED, "node-x": REFUSED, "node-y": reasons.TAINTED}),
    ("nodeTaintsPolicy Honor: a tolerated taint keeps the node in", Y_TAINTED,
     on(("node-a", 1), ("node-b", 1), ("node-x", 1)),
     incoming(by_node(taints_policy="Honor"), tolerations=[{"key": TAINTS[0]["key"],
                                                           "operator": "Exists"}]),
     {"node-a": REFUSED, "node-b": REFUSED, "node-x": REFUSED, "node-y": None}),
])
def test_through_every_filter(case, nodes, existing, new, want):
    assert reasons_for(new, cache_of(nodes, existing)) == want, case


@pytest.mark.parametrize("constraint, says", [
    ({"minDomains": "3"}, "spec.topologySpreadConstraints[0].minDomains is not an integer: '3'"),
    ({"maxSkew": "1"}, "spec.topologySpreadConstraints[0].maxSkew is not an integer: '1'"),
    ({"nodeAffinityPolicy": "honor"},
     "spec.topologySpreadConstraints[0].nodeAffinityPolicy is neither Honor nor Ignore: 'honor'"),
    ({"nodeTaintsPolicy": 1},
     "spec.topologySpreadConstraints[0].nodeTaintsPolicy is neither Honor nor Ignore: 1"),
    ({"topologyKey": None}, "spec.topologySpreadConstraints[0].topologyKey is not a label key: None"),
    ({"matchLabelKeys": "bar"},
     "spec.topologySpreadConstraints[0].matchLabelKeys is not a list of label keys: 'bar'"),
])
def test_a_field_of_the_wrong_shape_is_every_nodes_reason_naming_it(constraint, says):
    """A pod from a file (`cards what-if`) is not validated by an API server."""
    p = pod("p", None, {"foo": ""}, topologySpreadConstraints=[{**zone(), **constraint}])
    assert set(reasons_for(p, cache_of(FOUR)).values()) == {says}
    bad = pod("p", None, {}, topologySpreadConstraints={"maxSkew": 1})
    assert set(reasons_for(bad, cache_of(FOUR)).values()) == {
        "spec.topologySpreadConstraints is not a list"}
