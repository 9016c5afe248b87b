"""12,000 decisions over a seeded fill with pods leaving, hashed: the recorded digest was taken
before the scheduling core was restructured, so any change of any choice (node, cards, device
order, reason text) fails this test."""

import hashlib
import random

from tests.builders import mt_node, plain, slice_, whole
from tests.builders import sched_pod as pod
from webhook.model.cards import Fleet
from webhook.model.config import AllocatorConfig, Config, MthreadsConfig
from webhook.scheduling.decide import NoFit, place
from webhook.scheduling.request import request_of
from webhook.scheduling.state import ClusterState

MT = MthreadsConfig(memory_per_card=(96, 160))
FLEET = Fleet.of(MT.memory_per_card)
DECISIONS = 12_000
DIGEST = "766170c72372cadc24a12629026ca1214e65ed0f3d2595ca6ad7e8e4055882ac"


def _pod(rng: random.Random, i: int) -> dict:
    c = rng.choice([
        lambda: slice_(rng.choice([2, 8, 16, 32, 64]), rng.choice([None, 2, 4, 8]), name="c"),
        lambda: slice_(rng.choice([96, 128]), name="c"),
        lambda: whole(rng.choice([1, 2]), rng.choice([96, 160]), name="c"),
        lambda: plain(name="c", cpu=rng.choice(["100m", "2"])),
    ])()
    return pod(c, name=f"p{i}", uid=f"uid-{i}")


def fill(node_policy: str, gpu_policy: str) -> str:
    rng = random.Random(14)
    config = Config(mthreads=MT, allocator=AllocatorConfig(node_policy=node_policy,
                                                           gpu_policy=gpu_policy))
    state = ClusterState(MT)
    for n in range(40):
        state.set_node(mt_node(f"n{n}", rng.choice([1, 2, 4, 8]), rng.choice([96, 160]),
                               cpu=rng.choice(["16", "64"])))
    digest = hashlib.sha256()
    held: list[str] = []
    placed = refused = 0
    for i in range(DECISIONS // 4):
        if held and rng.random() < 0.3:
            state.remove(held.pop(rng.randrange(len(held))))
        p = _pod(rng, i)
        ask = request_of(p, config, FLEET)
        result = place(p, ask, state, config)
        if isinstance(result, NoFit):
            digest.update(f"{i} nofit {result.message}\n".encode())
            refused += 1
            continue
        digest.update(f"{i} {result.node} {result.devices} {result.gpu_index}\n".encode())
        state.add(result.share)
        held.append(result.share.uid)
        placed += 1
    assert placed > DECISIONS // 20 and refused > DECISIONS // 20  # both paths taken
    return digest.hexdigest()


def test_twelve_thousand_decisions_hash_as_recorded():
    got = "".join(fill(n, g) for n, g in [("binpack", "spread"), ("spread", "binpack"),
                                         ("binpack", "binpack"), ("spread", "spread")])
    assert hashlib.sha256(got.encode()).hexdigest() == DIGEST
