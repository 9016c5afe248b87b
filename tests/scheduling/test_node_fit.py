"""A node's own rules for a pod (webhook/scheduling/node_fit.py): the required node affinity's
expressions, short lists and the long ones read as sets."""

import pytest

from tests.builders import mt_node
from webhook.scheduling.node_fit import matches_selector_and_affinity

MANY = [f"host-{i}" for i in range(60_000)]


def affinity(operator: str, values: list) -> dict:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": operator, "values": values}]}]}}}}


@pytest.mark.parametrize("operator, values, node, matches", [
    ("In", ["a", "b"], "a", True),
    ("In", ["a", "b"], "c", False),
    ("In", MANY, "host-59999", True),
    ("In", MANY, "host-60000", False),
    ("NotIn", MANY, "host-7", False),
    ("NotIn", MANY, "elsewhere", True),
    ("In", MANY + [{"not": "a string"}, 7], "host-3", True),  # what is no label value is ignored
    ("In", [{"not": "a string"}] * 20, "host-3", False),
])
def test_in_and_not_in_over_short_and_long_lists(operator, values, node, matches):
    spec = affinity(operator, values)
    assert matches_selector_and_affinity(spec, mt_node(node)) is matches
    assert matches_selector_and_affinity(spec, mt_node(node)) is matches  # read again: the same


def test_a_changed_list_is_read_anew():
    values = [f"host-{i}" for i in range(100)]
    spec = affinity("In", values)
    assert matches_selector_and_affinity(spec, mt_node("host-5"))
    values.remove("host-5")
    spec = affinity("In", list(values))  # a pod updated: a new list
    assert not matches_selector_and_affinity(spec, mt_node("host-5"))
