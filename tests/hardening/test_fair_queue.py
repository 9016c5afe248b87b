"""Which waiting request a free thread takes (webhook/server/slow_clients.py FairQueue): the peer
running the fewest first, round-robin among equals, the last free thread kept for a peer
running nothing while another peer is about, all of them for a lone peer (issue 32, item 6)."""

from __future__ import annotations

import pytest

from webhook.server import slow_clients
from webhook.server.slow_clients import PRESENT_FOR, FairQueue, PrefetchingThreadWorker

THREADS = 4


def alone(peer) -> bool:
    return False


def others(peer) -> bool:
    return True


def queue_of(waiting: list[tuple[str, str]], running: dict[str, int] | None = None) -> FairQueue:
    """A queue holding `waiting` (peer, item) in arrival order, with `running` per peer."""
    q = FairQueue()
    for peer, count in (running or {}).items():
        for i in range(count):
            q.push(peer, f"{peer}-running-{i}")
            q.pop(free=THREADS)
    for peer, item in waiting:
        q.push(peer, item)
    return q


def dispatch(q: FairQueue, others_about=others) -> list[str]:
    """What the free threads take, as the worker asks: until none is free or none is given."""
    taken = []
    while (item := q.pop(THREADS - q.running_total, others_about)) is not None:
        taken.append(item)
    return taken


@pytest.mark.parametrize("waiting, running, others_about, taken", [
    # A lone peer gets every thread, in its own order.
    ([("a", "a1"), ("a", "a2"), ("a", "a3"), ("a", "a4"), ("a", "a5")], {}, alone,
     ["a1", "a2", "a3", "a4"]),
    # Two peers alternate, whoever came first; the last thread is kept for a third peer.
    ([("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("b", "b2")], {}, others,
     ["a1", "b1", "a2"]),
    # A peer already running goes after one running less.
    ([("a", "a1"), ("b", "b1"), ("b", "b2")], {"a": 2}, others, ["b1"]),
    # The flood's peer holds 3: the last thread stays free while another peer is about...
    ([("a", "a4"), ("a", "a5")], {"a": 3}, others, []),
    # ... and goes to that peer's request when it comes, ahead of the flood's.
    ([("a", "a4"), ("b", "b1")], {"a": 3}, others, ["b1"]),
    # With no one else about, the busy peer takes the last thread too.
    ([("a", "a4"), ("a", "a5")], {"a": 3}, alone, ["a4"]),
    # Two busy peers (2 + 1 running): the last thread is kept for a third.
    ([("a", "a3"), ("b", "b2")], {"a": 2, "b": 1}, others, []),
    ([("a", "a3"), ("b", "b2"), ("c", "c1")], {"a": 2, "b": 1}, others, ["c1"]),
    # Every thread busy: nothing is taken.
    ([("b", "b1")], {"a": 4}, others, []),
])
def test_what_the_free_threads_take(waiting, running, others_about, taken):
    q = queue_of(waiting, running)
    assert dispatch(q, others_about) == taken
    assert len(q) == len(waiting) - len(taken)


def test_many_requests_of_one_peer_do_not_go_before_another_peers_one():
    """The thread pool's first-come queue served 40 flood requests before the call that came
    after them; here the call is the next one taken."""
    q = queue_of([("flood", f"f{i}") for i in range(40)] + [("api", "call")],
                 running={"flood": 3})
    assert q.pop(free=1, others_about=others) == "call"


def test_a_finished_request_frees_its_peers_share():
    q = queue_of([("a", "a5"), ("b", "b1")], running={"a": 4})
    assert dispatch(q) == []
    q.done("a")
    assert dispatch(q) == ["b1"]
    q.done("a")
    assert q.running == {"a": 2, "b": 1}
    assert dispatch(q) == []  # a runs 2, b runs 1: the last thread waits for a newcomer
    q.done("b")
    assert dispatch(q) == ["a5"]  # two threads free: a takes one, the last stays free
    assert q.running_total == 3 and not q


@pytest.mark.parametrize("pushes, pops, left", [
    ([], 1, 0),
    ([("a", "x")], 1, 0),
    ([("a", "x"), ("a", "y"), ("b", "z")], 2, 1),
])
def test_counts(pushes, pops, left):
    q = queue_of(pushes)
    for _ in range(pops):
        q.pop(free=THREADS)
    assert len(q) == left
    assert bool(q) == (left > 0)


# -- who is about: what the worker tells the queue -------------------------------------------

@pytest.mark.parametrize("connected, accepted_lately, peer, about", [
    ({}, {}, "api", False),
    ({"api": 3}, {"api": 1.0}, "api", False),  # the lone peer itself
    ({"api": 3, "pod": 16}, {}, "api", True),  # another connected
    ({"pod": 16}, {"pod": 1.0}, "api", True),  # a newcomer asks: the flood's peer is about
    ({"pod": 16}, {"api": 1.0, "pod": 1.0}, "pod", True),  # api's call on a closed connection
    ({"pod": 16}, {"pod": 1.0}, "pod", False),  # api gone longer than PRESENT_FOR
])
def test_another_peer_is_about_while_connected_or_lately_accepted(connected, accepted_lately,
                                                                   peer, about):
    worker = PrefetchingThreadWorker.__new__(PrefetchingThreadWorker)  # no process, no sockets
    worker.peers, worker.accepted_at = dict(connected), dict(accepted_lately)
    assert worker._others_about(peer) is about


def test_peers_accepted_longer_ago_than_present_for_are_forgotten(monkeypatch):
    worker = PrefetchingThreadWorker.__new__(PrefetchingThreadWorker)
    now = 1000.0
    worker.accepted_at = {"old": now - PRESENT_FOR - 1, "api": now - PRESENT_FOR + 1,
                          "pod": now - 1}  # oldest first, as accept() keeps it
    monkeypatch.setattr(slow_clients.time, "monotonic", lambda: now)
    worker._forget_departed_peers()
    assert list(worker.accepted_at) == ["api", "pod"]
