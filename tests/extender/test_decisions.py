"""The filter's choice (decisions.pick) reads the nodes in the node policy's order and stops at
the first that fits: it must be the node a full scan with the policy picks, with the same cards."""

from __future__ import annotations

import random

import pytest

from tests.builders import mt_node, slice_, whole
from tests.builders import sched_pod as pod
from tests.extender.messages import CONFIG
from webhook.extender.cache import Cache
from webhook.extender.decisions import cards_on, pick
from webhook.model.pods import Kind
from webhook.scheduling.request import request_of
from webhook.scheduling.score import best_node, policies


def full_scan(p, ask, names, state):
    fitting = {}
    for n in names:
        reason, cards = cards_on(p, ask, n, state, CONFIG)
        if reason is None:
            fitting[n] = cards
    if not fitting:
        return None
    node_policy, _ = policies(p, CONFIG)
    node = best_node([state.nodes[n] for n in fitting], state, ask.request.kind, node_policy).name
    return node, tuple(c.id for c in fitting[node])


@pytest.mark.parametrize("seed", range(6))
def test_first_fit_is_the_full_scans_choice(seed):
    rng = random.Random(seed)
    cache = Cache(CONFIG)
    nodes = [mt_node(f"n{i}", cards=rng.choice([1, 2, 4]), units=rng.choice([96, 160]))
             for i in range(12)]
    cache.apply("node", "RESET", nodes)
    cache.apply("pod", "RESET", [])
    checked = 0
    for _ in range(150):
        if rng.random() < 0.1:
            shape = whole(1, rng.choice([96, 160]))
        else:
            shape = slice_(rng.choice([2, 4, 8, 16, 32, 64, 96, 128]), rng.choice([None, 1, 4, 8]))
        p = pod(shape, annotations=rng.choice([{}, {"hami.io/node-scheduler-policy": "spread"},
                                              {"hami.io/gpu-scheduler-policy": "binpack"}]))
        ask = request_of(p, CONFIG)
        if ask.invalid or ask.request.kind is Kind.NONE:
            continue
        names = [n["metadata"]["name"] for n in rng.sample(nodes, rng.randint(1, len(nodes)))]
        chosen, failed = cache.core.read(lambda state: pick(p, ask, names, state, CONFIG))
        want = cache.core.read(lambda state: full_scan(p, ask, names, state))
        if want is None:
            assert chosen is None and set(failed) == set(names)
            continue
        checked += 1
        assert (chosen.node, tuple(c.card for c in chosen.share.cards)) == want
        cache.core.assume(chosen.share, "default", p["metadata"]["name"])  # fill the fleet as the binds would
    assert checked > 30
