"""The scheduler cache both front-ends drive (webhook/scheduling/cache.py), event by event and
step by step of its lifecycle (no API, no threads)."""

import copy
from dataclasses import replace

import pytest

from tests.builders import (
    container_status,
    mt_node,
    plain,
    resize_pending,
    sched_pod,
    slice_,
    whole,
)
from webhook.model import annotations as keys
from webhook.model.config import MthreadsConfig
from webhook.model.hami import Device
from webhook.scheduling.cache import DROPPED, READ, Assumed, Phase, SchedulerCache
from webhook.scheduling.decide import Placement
from webhook.scheduling.pod_facts import facts_of
from webhook.scheduling.resources import pod_requests
from webhook.scheduling.shares import CardShare, PodShare

MT = MthreadsConfig(memory_per_card=(96, 160))
CARD = "n0-mthreads-0"


def cache(shows_unbound: bool = True) -> SchedulerCache:
    c = SchedulerCache(MT, shows_unbound)
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


def assumed(c: SchedulerCache, p: dict, memory: int = 8192, cores: int = 4) -> PodShare:
    """`p` seen pending, then a card chosen for it: its share assumed, its write under way."""
    c.apply("pod", "ADDED", p)
    share = ours(p, memory, cores)
    c.assume(share, "default", p["metadata"]["name"])
    return share


def reserved(c: SchedulerCache, p: dict, until: float = 100.0) -> PodShare:
    share = ours(p)
    c.reserve(Placement("n0", (), "0", share), p, until)
    return share


def used(c: SchedulerCache, card: str = CARD) -> tuple[int, int]:
    u = c.card(card)
    return u.memory_mib, u.cores


def test_ready_only_after_both_lists():
    c = SchedulerCache(MT)
    c.apply("node", "RESET", [])
    assert not c.ready
    c.apply("pod", "RESET", [])
    assert c.ready


@pytest.mark.parametrize("order", ["outcome first", "watch first"])
def test_bind_outcome_and_watch_in_either_order_count_the_share_once(order):
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    assert c.phase(p["metadata"]["uid"]) is Phase.BINDING and used(c) == (8192, 4)
    steps = [lambda: c.finish_binding(share), lambda: c.apply("pod", "MODIFIED", bound(p))]
    for step in steps if order == "outcome first" else reversed(steps):
        step()
        assert used(c) == (8192, 4)
    assert not c.assumed()


def test_an_old_unbound_event_after_our_bind_changes_nothing():
    c = cache()
    p = sched_pod(slice_(16, 4))
    assumed(c, p)
    c.apply("pod", "MODIFIED", p)  # older than our binding
    assert c.is_assumed(p["metadata"]["uid"]) and used(c) == (8192, 4)


def test_refused_write_gives_the_share_back():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    assert c.binding_refused(share, 500) == DROPPED
    assert c.card(CARD).idle and not c.assumed()


def test_refused_write_after_the_watch_showed_it_bound_keeps_the_real_share():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    c.apply("pod", "MODIFIED", bound(p, 4096, 2))  # bound by someone else (then our write: 409)
    assert c.binding_refused(share, 409) is None and not c.forget(share)
    assert used(c) == (4096, 2) and not c.assumed()


def test_409_then_a_read_counts_the_other_binding_not_ours():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    assert c.binding_refused(share, 409) == READ  # hold it until the read
    assert used(c) == (8192, 4) and c.uncertain() == [(p["metadata"]["uid"], "default",
                                                         p["metadata"]["name"])]
    other = bound(p, 4096, 2, card="n0-mthreads-1")
    assert c.resolved(p["metadata"]["uid"], 200, other) == "bound"
    assert c.card(CARD).idle and used(c, "n0-mthreads-1") == (4096, 2)
    assert not c.uncertain() and not c.assumed()


def test_lost_connection_holds_the_share_until_a_read_says_unbound():
    c = cache()
    p = sched_pod(whole(1))
    share = assumed(c, p, 49152, 16)
    uid = p["metadata"]["uid"]
    assert c.binding_unknown(share)
    assert c.resolved(uid, 0, None) == "unknown"  # still unreachable: keep counting
    assert used(c) == (49152, 16) and c.phase(uid) is Phase.UNCERTAIN
    assert c.resolved(uid, 200, p) == "unbound"
    assert c.card(CARD).idle and not c.uncertain() and not c.assumed()


@pytest.mark.parametrize("status, body", [(404, None), (200, "another uid")])
def test_a_read_that_finds_the_pod_gone_forgets_it(status, body):
    c = cache()
    p = sched_pod(slice_(8))
    share = assumed(c, p)
    c.binding_unknown(share)
    got = None
    if body:
        got = copy.deepcopy(p)
        got["metadata"]["uid"] = body
    assert c.resolved(p["metadata"]["uid"], status, got) == "gone"
    assert c.card(CARD).idle and not c.uncertain() and not c.assumed()


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
    assert c.assumed() == [a["metadata"]["uid"]]
    c.apply("pod", "RESET", [bound(a, 1024, 1), bound(b, 1024, 1)])
    assert used(c) == (2048, 2) and not c.assumed()


def plain_bound() -> dict:
    return sched_pod(plain(cpu="1"), node="n0", phase="Running")


@pytest.mark.parametrize("quantity", ["10e999999", "1e1000000", "1e2147483647"])
def test_a_relist_with_a_pod_asking_past_int64_keeps_every_bound_share(quantity):
    """Issue 46, finding 1: such a pod made the relist raise half-way, every share after it
    forgotten (and the extender's informer dead), so their cards were handed out again."""
    c = cache(shows_unbound=False)
    huge = bound(sched_pod(slice_(16, 4), name="huge"), card="n0-mthreads-1")
    huge["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = quantity
    other = bound(sched_pod(slice_(16, 4), name="other"))
    c.apply("pod", "RESET", [huge, other])
    assert used(c) == used(c, "n0-mthreads-1") == (8192, 4)


@pytest.mark.parametrize("resource, quantity", [
    ("cpu", "10e999999"), ("memory", "10e999999"), ("pods", "10e999999"),
    ("ephemeral-storage", "10e999999"), ("example.com/nic", "1e300000")])
def test_a_node_relist_with_allocatable_past_int64_keeps_every_node(resource, quantity):
    c = cache()
    huge = mt_node("huge", 2, 96)
    huge["status"]["allocatable"][resource] = quantity
    c.apply("node", "RESET", [huge, mt_node("n0", 2, 96)])
    assert sorted(n.name for n in c.snapshot().nodes) == ["huge", "n0"]


@pytest.mark.parametrize("event", ["DELETED", "MODIFIED"])
def test_a_deleted_or_finished_pod_frees_its_share(event):
    c = cache()
    p = bound(sched_pod(slice_(16, 4)))
    c.apply("pod", "ADDED", p)
    assert used(c) == (8192, 4) and len(c.snapshot().bound) == 1
    if event == "MODIFIED":
        p["status"]["phase"] = "Succeeded"
    c.apply("pod", event, p)
    assert c.card(CARD).idle and c.snapshot().bound == ()


# --- reservations (the extender's filter) -------------------------------------------------------

def test_a_reservation_is_counted_until_it_lapses():
    c = cache(shows_unbound=False)
    p = sched_pod(slice_(16, 4))
    reserved(c, p, until=100.0)
    uid = p["metadata"]["uid"]
    assert c.reservations() == [uid] and used(c) == (8192, 4) and not c.in_doubt(uid)
    assert c.expire(99.9) == 0 and used(c) == (8192, 4)
    assert c.expire(100.0) == 1 and c.card(CARD).idle and not c.assumed()


def test_a_taken_reservation_is_a_binding_and_lapses_no_more():
    c = cache(shows_unbound=False)
    p = sched_pod(slice_(16, 4))
    reserved(c, p)
    uid = p["metadata"]["uid"]
    taken = c.take_reservation(uid, lambda r: None)
    assert taken.placement.node == "n0" and taken.pod is p
    assert c.phase(uid) is Phase.BINDING and c.expire(float("inf")) == 0 and used(c) == (8192, 4)
    assert c.take_reservation(uid, lambda r: None) is None  # taken once


def test_a_reservation_refused_at_its_bind_is_released():
    c = cache(shows_unbound=False)
    p = sched_pod(slice_(16, 4))
    reserved(c, p)
    assert c.take_reservation(p["metadata"]["uid"], lambda r: "node(s) had untolerated taint") \
        == "node(s) had untolerated taint"
    assert c.card(CARD).idle and not c.assumed()


def test_a_new_reservation_of_the_pod_replaces_the_old_and_release_drops_it():
    c = cache(shows_unbound=False)
    p = sched_pod(slice_(16, 4))
    reserved(c, p)
    reserved(c, p)
    assert c.reservations() == [p["metadata"]["uid"]] and used(c) == (8192, 4)
    assert c.release(p["metadata"]["uid"]) and c.card(CARD).idle
    assert not c.release(p["metadata"]["uid"])


def test_release_leaves_a_binding_alone():
    c = cache()
    p = sched_pod(slice_(16, 4))
    assumed(c, p)
    assert not c.release(p["metadata"]["uid"]) and used(c) == (8192, 4)


# --- a watch of bound pods only (the extender's) ---------------------------------------------

@pytest.mark.parametrize("shows_unbound, listed, kept", [
    (True, "unbound", True),  # our binding is newer than the list
    (True, "absent", False),  # gone
    (True, "bound", True),  # its real share, the same
    (False, "absent", True),  # pending, or bound after the list, or gone: read it
    (False, "bound", True),
])
def test_a_relist_keeps_the_assumed_shares_the_list_cannot_contradict(shows_unbound, listed, kept):
    c = cache(shows_unbound)
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    c.finish_binding(share)
    shown = {"unbound": [p], "absent": [], "bound": [bound(p)]}[listed]
    c.apply("pod", "RESET", shown)
    assert used(c) == ((8192, 4) if kept else (0, 0))
    assert c.is_assumed(p["metadata"]["uid"]) == (kept and listed != "bound")
    # written, and not shown by a list of bound pods: its outcome must be read again
    assert (c.phase(p["metadata"]["uid"]) is Phase.UNCERTAIN) == (not shows_unbound and listed == "absent")


def test_a_relist_of_bound_pods_keeps_the_reservations():
    c = cache(shows_unbound=False)
    p = sched_pod(slice_(16, 4))
    reserved(c, p)
    c.apply("pod", "RESET", [])
    assert c.reservations() == [p["metadata"]["uid"]] and used(c) == (8192, 4)


def _changed_labels(b: dict) -> None:
    b["metadata"]["labels"] = {"app": "web"}


def _deleting(b: dict) -> None:
    b["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"


def _other_cores(b: dict) -> None:
    b["metadata"]["annotations"][keys.ALLOCATED] = f"{CARD},Mthreads,8192,2:;"


def _other_node(b: dict) -> None:
    b["spec"]["nodeName"] = "n1"


@pytest.mark.parametrize("change, kept, cores, labels, terminating", [
    (None, True, 4, {}, False),  # as written: the assumed share itself, nothing read again
    (_changed_labels, False, 4, {"app": "web"}, False),
    (_deleting, False, 4, {}, True),
    (_other_cores, False, 2, {}, False),  # the annotation counts, not what was assumed
    (_other_node, False, 4, {}, False),  # bound elsewhere: counted there, as the annotation says
])
def test_the_watch_of_a_written_reservation_keeps_its_share_only_when_the_pod_shows_it(
        change, kept, cores, labels, terminating):
    c = cache()
    p = sched_pod(slice_(16, 4))
    uid = p["metadata"]["uid"]
    share = replace(ours(p), pod=facts_of(p))
    c.reserve(Placement("n0", ((Device(CARD, 8192, 4),),), "0", share), p, 100.0)
    assert isinstance(c.take_reservation(uid, lambda a: None), Assumed)
    c.finish_binding(share)
    b = bound(p)
    if change is not None:
        change(b)
    c.apply("pod", "MODIFIED", b)
    now = c.share(uid)
    assert (now is share) == kept and not c.assumed()
    assert used(c) == (8192, cores) and now.node == b["spec"]["nodeName"]
    assert dict(now.pod.labels) == labels and now.pod.terminating == terminating


# -- in-place resize (1.35): a bound pod's requests and status change; the node counts it anew

def _resized(p: dict, spec_cpu: str, allocated: str | None, condition: str | None = None) -> dict:
    r = copy.deepcopy(p)
    r["spec"]["containers"][0]["resources"]["requests"]["cpu"] = spec_cpu
    r["status"] = {"phase": "Running", "containerStatuses": [container_status(
        r["spec"]["containers"][0]["name"], allocated and {"cpu": allocated},
        allocated and {"cpu": allocated})]}
    if condition:
        r["status"]["conditions"] = [resize_pending(condition)]
    return r


# (spec cpu, allocated and actuated, PodResizePending's reason) -> millicores counted on the node
RESIZES = [
    ("an increase pending counts the spec", ("2", "1", None), 2000),
    ("an increase infeasible counts what runs", ("2", "1", "Infeasible"), 1000),
    ("an increase done counts it", ("2", "2", None), 2000),
    ("a decrease not yet done counts what runs", ("500m", "1", None), 1000),
    ("a decrease done frees the rest", ("500m", "500m", None), 500),
]


def test_a_bound_pod_resized_in_place_is_counted_anew_at_each_event_never_twice():
    """One pod through every step of RESIZES, one MODIFIED event each."""
    c = cache()
    p = bound(sched_pod(plain(cpu="1"), uid="u-resize"))
    other = bound(sched_pod(plain(cpu="250m"), uid="u-other"), card="n0-mthreads-1")
    c.apply("pod", "ADDED", p)
    c.apply("pod", "ADDED", other)
    assert c.read(lambda s: s.requested_on("n0")).cpu_milli == 1250
    for name, (spec_cpu, allocated, condition), cpu in RESIZES:
        c.apply("pod", "MODIFIED", _resized(p, spec_cpu, allocated, condition))
        requested = c.read(lambda s: s.requested_on("n0"))
        assert (name, requested.cpu_milli, requested.pods) == (name, cpu + 250, 2)
        assert used(c) == (8192, 4)  # its card share stays as it was
    c.apply("pod", "DELETED", p)
    assert c.read(lambda s: s.requested_on("n0")).cpu_milli == 250  # nothing left behind


def test_our_pod_seen_bound_with_a_resized_status_is_counted_from_its_status():
    c = cache()
    p = sched_pod(plain(cpu="1"), uid="u-ours")
    assumed(c, p)
    c.finish_binding(ours(p))
    c.apply("pod", "MODIFIED", _resized(bound(p), "1", "3"))
    assert c.read(lambda s: s.requested_on("n0")).cpu_milli == 3000
