"""What one decision costs for a pod with a long node affinity (issue 46, finding 4): its lists
are read into sets once per decision, not once per node, and a pod whose node rules times the
nodes pass the decision's budget is refused at once, before any node is read."""

from __future__ import annotations

import pytest

from tests.builders import mt_node, sched_pod, slice_
from webhook.extender.decisions import room_outside
from webhook.model import annotations as keys
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling import reasons
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.cycle_state import cycle_of
from webhook.scheduling.decide import NoFit, Placement, place
from webhook.scheduling.feasible import NODE_RULES_BUDGET
from webhook.scheduling.request import request_of

MT = MthreadsConfig(memory_per_card=(96, 160))
CONFIG = Config(mthreads=MT)
HOST = "kubernetes.io/hostname"
NODES = 60
LISTS = 80  # more than the 64 lists node_fit kept as sets before


class Counted(list):
    """A `values` list that counts the times it is read through."""

    reads = 0

    def __iter__(self):
        Counted.reads += 1
        return super().__iter__()


def cache_of(nodes: int) -> SchedulerCache:
    c = SchedulerCache(MT)
    c.apply("node", "RESET", [mt_node(f"n{i}", 2, 96) for i in range(nodes)])
    c.apply("pod", "RESET", [])
    return c


def with_affinity(terms: list[dict], annotations: dict | None = None) -> dict:
    return sched_pod(slice_(8, 4), annotations=annotations, spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})


def hostile() -> dict:
    """Issue 46's pod: long NotIn lists on the hostname, and a card no node has (no node fits,
    so every node is read for its reason)."""
    exprs = [{"key": HOST, "operator": "NotIn", "values": Counted(f"h{i}-{j}" for j in range(200))}
             for i in range(LISTS)]
    return with_affinity([{"matchExpressions": exprs}], {keys.USE_CARDS: "nowhere-mthreads-0"})


def decide_allocator(c: SchedulerCache, p: dict) -> object:
    ask = request_of(p, CONFIG)
    cycle = cycle_of(p, ask, CONFIG)
    return c.read(lambda state: place(p, ask, state, CONFIG, cycle))


def decide_extender(c: SchedulerCache, p: dict) -> object:
    """The filter's look outside kube-scheduler's sample, which checks the node rules."""
    ask = request_of(p, CONFIG)
    rules = cycle_of(p, ask, CONFIG).rules
    return c.read(lambda state: room_outside(p, ask, ["n0"], state, CONFIG, rules))


@pytest.mark.parametrize("decide", [decide_allocator, decide_extender], ids=["allocator", "extender"])
def test_a_long_affinity_is_read_once_per_decision_not_once_per_node(decide):
    c = cache_of(NODES)
    p = hostile()
    Counted.reads = 0
    got = decide(c, p)
    # once to make its set (before: the 80 lists read again for every node, 4,720-9,600)
    assert Counted.reads <= 2 * LISTS
    if decide is decide_allocator:  # and the answer is the same: every node read, for its cards
        assert isinstance(got, NoFit) and got.rejected == {reasons.UUID_MISMATCH: NODES}
    else:
        assert got is None


def many_terms(count: int) -> list[dict]:
    """`count` terms, the last of which lets n1 in."""
    return [{"matchExpressions": [{"key": HOST, "operator": "In", "values": [f"x{i}"]}]}
            for i in range(count - 1)] + [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]


def test_node_rules_past_the_budget_refuse_the_pod_before_any_node_is_read():
    nodes = 50
    c = cache_of(nodes)
    within = NODE_RULES_BUDGET // nodes - 2  # with the pod's one rule besides its terms
    got = decide_allocator(c, with_affinity(many_terms(within)))
    assert isinstance(got, Placement) and got.node == "n1"  # read as ever
    got = decide_allocator(c, with_affinity(many_terms(within + 2)))  # one past the budget
    assert isinstance(got, NoFit)
    assert got.rejected == {reasons.TOO_MANY_NODE_RULES: nodes}
    assert reasons.TOO_MANY_NODE_RULES in got.message
