"""The cluster state (webhook/scheduling/state.py): usage rebuilt from bound pods, idempotent
by uid, indexed for the node policies."""

import pytest

from tests.builders import mt_node, plain
from tests.builders import sched_pod as pod
from webhook.model import annotations as keys
from webhook.model.config import MthreadsConfig
from webhook.scheduling.shares import share_of
from webhook.scheduling.state import ClusterState

MT = MthreadsConfig(memory_per_card=(96, 160))


def bound(text, node="n", **kw):
    ann = {keys.ALLOCATED: text} if text is not None else {}
    return pod(plain(cpu="1"), node=node, annotations=ann, phase="Running", **kw)


@pytest.mark.parametrize("text, cards, whole_node", [
    ("n-mthreads-0,Mthreads,4096,2:;", {"n-mthreads-0": (4096, 2, 0)}, False),
    ("n-mthreads-0,Mthreads,4096,2:;n-mthreads-0,Mthreads,1024,0:;;", {"n-mthreads-0": (5120, 2, 0)}, False),
    ("n-mthreads-0,Mthreads,49152,16:n-mthreads-1,Mthreads,49152,16:;",
     {"n-mthreads-0": (49152, 16, 0), "n-mthreads-1": (49152, 16, 0)}, False),
    (None, {}, False),  # no allocation: cpu/memory only
    # garbled: the cards it names are held whole, never under-counted
    ("n-mthreads-1,Mthreads,12x,2:;", {"n-mthreads-1": (0, 0, 1)}, False),
    ("n-mthreads-0,Nvidia,1,1:;", {"n-mthreads-0": (0, 0, 1)}, False),
    (",Mthreads,4096,2:;", {}, True),  # no card id: the whole node
    ("n-mthreads-0,Mthreads,-5,2:;", {"n-mthreads-0": (0, 0, 1)}, False),
    ("garbage", {}, True),
    ("", {}, True),
])
def test_share_from_annotation(text, cards, whole_node):
    s = share_of(bound(text))
    assert {c.card: (c.memory_mib, c.cores, int(c.whole)) for c in s.cards} == cards
    assert s.whole_node == whole_node
    assert s.resources.cpu_milli == 1000 and s.resources.pods == 1


def test_garbled_uses_gpu_index_too():
    p = bound("oops")
    p["metadata"]["annotations"][keys.GPU_INDEX] = "2,3"
    s = share_of(p)
    assert {c.card for c in s.cards} == {"n-mthreads-2", "n-mthreads-3"} and not s.whole_node


def test_add_and_remove_are_idempotent():
    state = ClusterState(MT)
    state.set_node(mt_node("n", 2, 96))
    p = bound("n-mthreads-0,Mthreads,4096,2:;")
    share = share_of(p)
    state.add(share)
    state.add(share)
    assert state.card("n-mthreads-0").memory_mib == 4096
    assert state.requested_on("n").cpu_milli == 1000
    state.remove(share.uid)
    state.remove(share.uid)
    assert state.card("n-mthreads-0").idle and state.requested_on("n").pods == 0
    assert state.cards == {}


def test_changed_share_replaces_the_old_one():
    state = ClusterState(MT)
    uid = "u1"
    state.add(share_of(bound("n-mthreads-0,Mthreads,4096,2:;", uid=uid)))
    state.add(share_of(bound("n-mthreads-1,Mthreads,2048,1:;", uid=uid)))
    assert state.card("n-mthreads-0").idle and state.card("n-mthreads-1").memory_mib == 2048


@pytest.mark.parametrize("policy", ["binpack", "spread"])
@pytest.mark.parametrize("least_mib, least_cores", [(0, 0), (1, 1), (2048, 2), (4096, 0), (8192, 4),
                                                    (40000, 1), (49152, 16), (81920, 16), (90000, 1)])
def test_in_order_yields_every_node_with_room_once_in_policy_order(policy, least_mib, least_cores):
    import random
    rng = random.Random(least_mib * 31 + least_cores)
    state = ClusterState(MT)

    def check(asked=policy):  # asked as the state changes: the buckets it remembers must follow
        got = list(state.in_order(asked, least_mib, least_cores))
        assert len(got) == len(set(got))
        fits = {n for n, room in state.room.items()
                if any(m >= least_mib and c >= least_cores for m, c in room.free)}
        assert fits <= set(got)  # the buckets may let a few more through, never keep one out
        sign = -1 if asked == "binpack" else 1
        assert got == sorted(got, key=lambda n: (sign * state.room[n].used, n))

    for i in range(10):
        state.set_node(mt_node(f"n{i}", 4, rng.choice([96, 160])))
    check()
    for i in range(60):  # random slices, each on a random card with room for it
        node, card = f"n{rng.randrange(10)}", rng.randrange(4)
        mib, cores = rng.choice([1024, 4096, 16384]), rng.choice([0, 1, 4, 8])
        cid = f"{node}-mthreads-{card}"
        u, cap = state.card(cid), state.nodes[node].cards.cards[card].memory_mib
        if u.memory_mib + mib <= cap and u.cores + cores <= 16:
            state.add(share_of(bound(f"{cid},Mthreads,{mib},{cores}:;", node=node, uid=f"u{i}")))
        if i % 10 == 9:
            check()
    other = "spread" if policy == "binpack" else "binpack"
    check(other)  # a policy first asked late: its lists are made from every node's room
    state.remove("u0")
    state.remove("u1")
    check()
    check(other)
    state.clear_nodes()  # a relist
    for i in range(3):
        state.set_node(mt_node(f"m{i}", 2, 96))
    check()
    check(other)


def test_usage_of_cards_of_unseen_nodes_waits_for_the_node():
    state = ClusterState(MT)
    state.add(share_of(bound("late-mthreads-0,Mthreads,4096,2:;", node="late")))
    state.set_node(mt_node("late", 1, 96))
    assert state.card("late-mthreads-0").memory_mib == 4096


def test_generation_moves_only_when_room_may_appear():
    state = ClusterState(MT)
    node = mt_node("n", 1, 96)
    state.set_node(node)
    g = state.generation
    share = share_of(bound("n-mthreads-0,Mthreads,4096,2:;"))
    state.add(share)
    assert state.generation == g  # less room: nothing to retry
    state.set_node(mt_node("n", 1, 96))  # a heartbeat that changes nothing read
    assert state.generation == g
    state.remove(share.uid)
    assert state.generation > g
