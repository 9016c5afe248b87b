"""The pod cache both front-ends drive, event order by event order (no API, no threads)."""

import copy

import pytest

from tests.builders import mt_node, plain, sched_pod, slice_, whole
from webhook import annotations as keys
from webhook.config import MthreadsConfig
from webhook.scheduling.cache import PodCache
from webhook.scheduling.shares import CardShare, PodShare
from webhook.scheduling.resources import pod_requests

MT = MthreadsConfig(memory_per_card=(96, 160))
CARD = "n0-mthreads-0"


def cache(scheduler: str | None = "hami-scheduler", **kw) -> PodCache:
    c = PodCache(MT, scheduler, **kw)
    c.apply("node", "RESET", [mt_node("n0", 2, 96)])
    c.apply("pod", "RESET", [])
    return c


def ours(p: dict, memory: int = 8192, cores: int = 4) -> PodShare:
    return PodShare(p["metadata"]["uid"], "n0", pod_requests(p), (CardShare(CARD, memory, cores),))


def bound(p: dict, memory: int = 8192, cores: int = 4, card: str = CARD) -> dict:
    b = copy.deepcopy(p)
    b["spec"]["nodeName"] = card.rsplit("-mthreads-", 1)[0]
    b["metadata"]["annotations"][keys.ALLOCATED] = f"{card},Mthreads,{memory},{cores}:;"
    return b


def assumed(c: PodCache, p: dict, memory: int = 8192, cores: int = 4) -> PodShare:
    """`p` seen pending, then a card chosen for it: its share assumed."""
    c.apply("pod", "ADDED", p)
    share = ours(p, memory, cores)
    c.assume(share)
    return share


def used(c: PodCache, card: str = CARD) -> tuple[int, int]:
    u = c.state.card(card)
    return u.memory_mib, u.cores


def test_ready_only_after_both_lists():
    c = PodCache(MT)
    c.apply("node", "RESET", [])
    assert not c.ready
    c.apply("pod", "RESET", [])
    assert c.ready


def test_pending_keeps_only_our_scheduler_s_live_pods():
    c = cache()
    mine, theirs = sched_pod(slice_(8)), sched_pod(slice_(8), spec={"schedulerName": "default"})
    leaving = sched_pod(slice_(8))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for p in (mine, theirs, leaving):
        c.apply("pod", "ADDED", p)
    assert set(c.pending) == {mine["metadata"]["uid"]}
    assert set(cache(None).pending) == set()  # the extender's keeps every scheduler's


@pytest.mark.parametrize("order", ["outcome first", "watch first"])
def test_bind_outcome_and_watch_in_either_order_count_the_share_once(order):
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    assert not c.pending and used(c) == (8192, 4)
    steps = [lambda: c.bind_ok(share), lambda: c.apply("pod", "MODIFIED", bound(p))]
    for step in steps if order == "outcome first" else reversed(steps):
        step()
        assert used(c) == (8192, 4)
    assert not c.assumed and not c.in_flight and not c.pending


def test_an_old_unbound_event_after_our_bind_changes_nothing():
    c = cache()
    p = sched_pod(slice_(16, 4))
    assumed(c, p)
    c.apply("pod", "MODIFIED", p)  # older than our binding
    assert not c.pending and used(c) == (8192, 4)


def test_refused_write_gives_the_share_back_and_the_pod_waits_again():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    assert c.bind_failed(share, p)
    assert c.state.card(CARD).idle and list(c.pending) == [p["metadata"]["uid"]]
    assert not c.assumed and not c.in_flight


def test_refused_write_after_the_watch_showed_it_bound_keeps_the_real_share():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    c.apply("pod", "MODIFIED", bound(p, 4096, 2))  # bound by someone else (then our write: 409)
    assert not c.bind_failed(share, p)
    assert used(c) == (4096, 2) and not c.pending


def test_409_then_a_read_counts_the_other_binding_not_ours():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    c.bind_unknown(share, "default", p["metadata"]["name"])  # 409: hold it until the read
    assert used(c) == (8192, 4) and p["metadata"]["uid"] in c.uncertain
    other = bound(p, 4096, 2, card="n0-mthreads-1")
    assert c.resolved(p["metadata"]["uid"], 200, other) == "bound"
    assert c.state.card(CARD).idle and used(c, "n0-mthreads-1") == (4096, 2)
    assert not c.uncertain and not c.assumed


def test_lost_connection_holds_the_share_until_a_read_says_unbound():
    c = cache()
    p = sched_pod(whole(1))
    share = assumed(c, p, 49152, 16)
    uid = p["metadata"]["uid"]
    c.bind_unknown(share, "default", p["metadata"]["name"])
    assert c.resolved(uid, 0, None) == "unknown"  # still unreachable: keep counting
    assert used(c) == (49152, 16) and uid in c.uncertain
    assert c.resolved(uid, 200, p) == "unbound"
    assert c.state.card(CARD).idle and list(c.pending) == [uid] and not c.uncertain


@pytest.mark.parametrize("status, body", [(404, None), (200, "another uid")])
def test_a_read_that_finds_the_pod_gone_forgets_it(status, body):
    settled = []
    c = cache(on_settled=settled.append)
    p = sched_pod(slice_(8))
    share = assumed(c, p)
    c.bind_unknown(share, "default", p["metadata"]["name"])
    got = None
    if body:
        got = copy.deepcopy(p)
        got["metadata"]["uid"] = body
    assert c.resolved(p["metadata"]["uid"], status, got) == "gone"
    assert c.state.card(CARD).idle and not c.uncertain and not c.assumed and not c.pending
    assert settled == [p["metadata"]["uid"]]


def test_a_read_while_the_write_is_under_way_decides_nothing():
    c = cache()
    p = sched_pod(slice_(8))
    assumed(c, p)
    assert c.resolved(p["metadata"]["uid"], 200, p) == "unknown"
    assert used(c) == (8192, 4)


def test_relist_in_the_middle_keeps_only_binds_newer_than_the_list():
    c = cache()
    a, b, gone = (sched_pod(slice_(8)) for _ in range(3))
    for p in (a, b, gone):
        assumed(c, p, 1024, 1)
    assert used(c) == (3072, 3)
    # a lost watch: the relist shows a still unbound (our write is newer), b bound, gone gone
    c.apply("pod", "RESET", [a, bound(b, 1024, 1), plain_bound()])
    assert used(c) == (2048, 2)
    assert set(c.assumed) == {a["metadata"]["uid"]} and not c.pending
    c.apply("pod", "RESET", [bound(a, 1024, 1), bound(b, 1024, 1)])
    assert used(c) == (2048, 2) and not c.assumed


def plain_bound() -> dict:
    return sched_pod(plain(cpu="1"), node="n0", phase="Running")


def test_changed_annotations_of_a_pending_pod_are_reported():
    changed = []
    c = cache(on_changed=changed.append)
    p = sched_pod(slice_(8))
    c.apply("pod", "ADDED", p)
    c.apply("pod", "MODIFIED", p)
    assert changed == []
    q = copy.deepcopy(p)
    q["metadata"]["annotations"][keys.USE_CARDS] = CARD
    c.apply("pod", "MODIFIED", q)
    assert changed == [p["metadata"]["uid"]]


def test_deleted_pod_frees_its_share_and_is_settled():
    settled = []
    c = cache(on_settled=settled.append)
    p = bound(sched_pod(slice_(16, 4)))
    c.apply("pod", "ADDED", p)
    assert used(c) == (8192, 4)
    c.apply("pod", "DELETED", p)
    assert c.state.card(CARD).idle and settled == [p["metadata"]["uid"]] * 2


# --- a watch of bound pods only (the extender's) ---------------------------------------------

def test_with_bound_pods_watched_only_no_pod_waits():
    c = cache(None, unbound_watched=False)
    p = sched_pod(slice_(16, 4))
    c.apply("pod", "ADDED", p)  # not what that watch sends; kept nowhere if it did
    share = assumed(c, p)
    assert c.bind_failed(share, p)
    assert not c.pending and not c.assumed and c.state.card(CARD).idle


@pytest.mark.parametrize("unbound_watched, listed, kept", [
    (True, "unbound", True),  # our binding is newer than the list
    (True, "absent", False),  # gone
    (True, "bound", True),  # its real share, the same
    (False, "absent", True),  # pending, or bound after the list, or gone: the caller asks
    (False, "bound", True),
])
def test_a_relist_keeps_the_assumed_shares_the_list_cannot_contradict(unbound_watched, listed, kept):
    c = cache(None, unbound_watched=unbound_watched)
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    c.bind_ok(share)
    shown = {"unbound": [p], "absent": [], "bound": [bound(p)]}[listed]
    c.apply("pod", "RESET", shown)
    assert used(c) == ((8192, 4) if kept else (0, 0))
    assert (p["metadata"]["uid"] in c.assumed) == (kept and listed != "bound")
