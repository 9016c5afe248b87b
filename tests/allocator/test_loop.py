"""The allocator's decision loop on the shared pod cache, with a fake API (no process): every
event order that matters between a binding's outcome and the watch, and no API call made on
the decision thread."""

from __future__ import annotations

import copy
import threading

import pytest

from tests.builders import mt_node, sched_pod, slice_, whole
from tests.harness.fake_api import FakeApi
from tests.harness.wait import wait_for
from webhook.allocator.loop import Allocator
from webhook.metrics.allocator_metrics import Metrics
from webhook.model import annotations as keys
from webhook.model.config import parse_config
from webhook.scheduling import binding_cycle
from webhook.scheduling import queue as pending_queue
from webhook.scheduling.cache import Phase

CONFIG = parse_config({"devices": {"mthreads": {"memoryPerCard": [96, 160]}}})


class Leader:
    def __init__(self):
        self.changed = threading.Event()

    def holds(self) -> bool:
        return True


class ThreadRecordingApi(FakeApi):
    def call(self, method, path, *a, **kw):
        self.threads.append(threading.current_thread())
        return super().call(method, path, *a, **kw)


@pytest.fixture
def alloc():
    api = ThreadRecordingApi()
    api.threads = []
    a = Allocator(CONFIG, api, Leader(), Metrics(), "test", bind_threads=2)
    a.session = 1
    a._apply(1, "node", "RESET", [mt_node("n0", 1, 96)])
    a._apply(1, "pod", "RESET", [])
    yield a
    a.binder.shutdown()
    a.reporter.stop()


def add(a: Allocator, p: dict) -> dict:
    a._apply(1, "pod", "ADDED", p)
    a.api.pods[("default", p["metadata"]["name"])] = copy.deepcopy(p)
    return p


def settle(a: Allocator) -> None:
    """Apply outcomes until no write or read is under way."""
    def idle():
        a._drain(0.05)
        return a.binder.in_flight == 0 and not a.reading
    wait_for(idle, 10, interval=0, what="the binder's outcomes")


def used(a: Allocator, card: str = "n0-mthreads-0") -> tuple[int, int]:
    u = a.cache.card(card)
    return u.memory_mib, u.cores


def watch_bound(a: Allocator, p: dict) -> None:
    a._apply(1, "pod", "MODIFIED", a.api.pods[("default", p["metadata"]["name"])])


def test_outcome_before_the_watch_counts_the_share_once(alloc):
    p = add(alloc, sched_pod(slice_(16, 4)))
    assert alloc.schedule_pass() == 1
    assert used(alloc) == (8192, 4)  # assumed at once, before the write's outcome
    settle(alloc)
    assert alloc.metrics.allocated._value.get() == 1 and used(alloc) == (8192, 4)
    watch_bound(alloc, p)
    assert used(alloc) == (8192, 4) and not alloc.cache.assumed() and not len(alloc.queue)


def test_watch_before_the_outcome_counts_the_share_once(alloc):
    p = add(alloc, sched_pod(slice_(16, 4)))
    alloc.api.delay = 0.3  # the write's reply comes after the watch event
    assert alloc.schedule_pass() == 1
    (_, _, body), = wait_for(lambda: alloc.api.bindings(), 10, what="the write")
    shown = copy.deepcopy(p)  # what the watch shows once the write is in (its reply still on the way)
    shown["spec"]["nodeName"] = body["target"]["name"]
    shown["metadata"]["annotations"].update(body["metadata"]["annotations"])
    alloc._apply(1, "pod", "MODIFIED", shown)
    assert alloc.binder.in_flight == 1 and not alloc.cache.assumed() and used(alloc) == (8192, 4)
    settle(alloc)
    assert used(alloc) == (8192, 4) and not alloc.cache.assumed()


def test_409_is_read_off_the_decision_thread_and_the_real_binding_counts(alloc):
    p = add(alloc, sched_pod(slice_(16, 4)))
    stored = alloc.api.pods[("default", p["metadata"]["name"])]
    stored["spec"]["nodeName"] = "n0"  # someone else bound it, to other figures
    stored["metadata"]["annotations"][keys.ALLOCATED] = "n0-mthreads-0,Mthreads,4096,2:;"
    alloc.api.status = 409
    alloc.schedule_pass()
    settle(alloc)
    assert used(alloc) == (4096, 2) and not alloc.cache.uncertain() and not len(alloc.queue)
    gets = [t for t, c in zip(alloc.api.threads, alloc.api.calls) if c[0] == "GET"]
    assert gets and all(t is not threading.current_thread() for t in gets)


def test_unknown_outcome_holds_the_cards_until_a_read_says_unbound(alloc, monkeypatch):
    monkeypatch.setattr(binding_cycle, "REREAD_EVERY", 0.0)
    p = add(alloc, sched_pod(whole(1)))
    alloc.api.raise_error = True
    alloc.schedule_pass()
    settle(alloc)
    uid = p["metadata"]["uid"]
    assert alloc.cache.phase(uid) is Phase.UNCERTAIN and used(alloc) == (49152, 16)
    alloc.api.read_error = True  # still unreachable: keep holding
    alloc.schedule_pass()
    settle(alloc)
    assert alloc.cache.phase(uid) is Phase.UNCERTAIN and used(alloc) == (49152, 16)
    alloc.api.raise_error = alloc.api.read_error = False
    alloc.schedule_pass()  # the read: still unbound, so the share goes and the pod waits again
    settle(alloc)
    assert alloc.cache.phase(uid) is not Phase.UNCERTAIN and uid in alloc.queue
    assert alloc.cache.card("n0-mthreads-0").idle
    alloc.schedule_pass()  # decided again: one card, not two
    settle(alloc)
    assert used(alloc) == (49152, 16) and len(alloc.api.bindings()) == 2


def test_refused_write_gives_the_cards_back_and_retries_after_a_pause(alloc, monkeypatch):
    p = add(alloc, sched_pod(whole(1)))
    alloc.api.status = 500
    alloc.schedule_pass()
    settle(alloc)
    assert alloc.cache.card("n0-mthreads-0").idle and p["metadata"]["uid"] in alloc.queue
    assert alloc.schedule_pass() == 0  # backing off
    monkeypatch.setattr(pending_queue, "ERROR_RETRY", 0.0)
    alloc.api.status = 201
    assert alloc.schedule_pass() == 1


def test_relist_in_the_middle_keeps_the_share_of_a_write_under_way(alloc):
    p = add(alloc, sched_pod(whole(1)))
    alloc.api.delay = 0.3
    alloc.schedule_pass()
    alloc._apply(1, "pod", "RESET", [p])  # a list taken before our binding
    assert used(alloc) == (49152, 16)
    q = add(alloc, sched_pod(slice_(8)))
    assert alloc.schedule_pass() == 0  # the card is held whole: q must wait
    settle(alloc)
    assert q["metadata"]["uid"] in alloc.queue and used(alloc) == (49152, 16)


def test_unschedulable_pods_are_reported_off_the_decision_thread(alloc):
    add(alloc, sched_pod(whole(2)))  # one card only: never fits
    alloc.schedule_pass()
    wait_for(lambda: alloc.reporter.idle() and len(alloc.api.calls) >= 2, 10, what="the report")
    methods = sorted(c[0] for c in alloc.api.calls)
    assert methods == ["PATCH", "POST"]  # the PodScheduled condition and the event
    assert all(t is not threading.current_thread() for t in alloc.api.threads)


def test_a_session_s_late_outcomes_are_ignored(alloc):
    add(alloc, sched_pod(slice_(8)))
    alloc.api.delay = 0.2
    alloc.schedule_pass()
    alloc._end_session()  # the lease was lost: the state is rebuilt by the next session
    wait_for(lambda: (alloc._drain(0.05), alloc.binder.in_flight == 0)[1], 10, interval=0,
             what="the outcome")
    assert not alloc.cache.assumed() and alloc.cache.card("n0-mthreads-0").idle


def test_pending_pods_are_decided_by_priority_then_age(alloc):
    """kube-scheduler's queue order: the higher spec.priority first, then the older pod. With
    room for one whole card, the high-priority pod gets it although it was created last."""
    def at(second, priority=None, name=None):
        p = sched_pod(whole(1, 96), name=name, spec={} if priority is None else {"priority": priority})
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"
        return p
    old, middle, urgent = at(1, name="old"), at(2, 0, name="middle"), at(3, 1000, name="urgent")
    for p in (old, middle, urgent):
        add(alloc, p)
    assert alloc.schedule_pass() == 1
    settle(alloc)
    (_, path, _), = alloc.api.bindings()
    assert path.endswith("/pods/urgent/binding")


# --- the backoff of pods that did not fit (issue 32) -------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _change_the_state(a: Allocator, i: int) -> None:
    """A change a decision reads (a node added that fits nothing the test's pod asks)."""
    before = a.cache.generation
    a._apply(1, "node", "ADDED", mt_node(f"extra{i}", 1, 96))
    assert a.cache.generation != before


def test_a_pod_that_did_not_fit_is_retried_after_its_backoff_not_on_every_change(alloc):
    """Changes every 0.25 s for 40 s: the pod is decided when its backoff (1, 2, 4, 8, 10, 10 s)
    is over, 7 times, not 160 times."""
    alloc.clock = clock = Clock()
    p = add(alloc, sched_pod(whole(2)))  # one card a node: never fits
    uid = p["metadata"]["uid"]
    tried_at = []
    for step in range(160):
        _change_the_state(alloc, step)
        before = alloc.queue.last_try(uid)
        alloc.schedule_pass()
        if alloc.queue.last_try(uid) is not before:
            tried_at.append(clock.now - 1000.0)
        clock.now += 0.25
    assert tried_at == [0.0, 1.0, 3.0, 7.0, 15.0, 25.0, 35.0]
    assert alloc.queue.last_try(uid).failures == 7


def test_without_a_change_the_pod_waits_for_the_backstop(alloc):
    alloc.clock = clock = Clock()
    p = add(alloc, sched_pod(whole(2)))
    uid = p["metadata"]["uid"]
    alloc.schedule_pass()
    clock.now += pending_queue.RETRY_BACKSTOP - 0.1
    alloc.schedule_pass()
    assert alloc.queue.last_try(uid).failures == 1  # its backoff (1 s) is over, but nothing changed
    clock.now += 0.1
    alloc.schedule_pass()
    assert alloc.queue.last_try(uid).failures == 2


def test_no_backoff_retries_on_every_change_as_before(alloc):
    alloc.clock = clock = Clock()
    alloc.backoff = alloc.queue.backoff = (0.0, 0.0)
    p = add(alloc, sched_pod(whole(2)))
    for step in range(10):
        _change_the_state(alloc, step)
        alloc.schedule_pass()
        clock.now += 0.25
    assert alloc.queue.last_try(p["metadata"]["uid"]).failures == 10


@pytest.mark.parametrize("update, may_fit", [
    (lambda p: p["metadata"]["annotations"].update({"hami.io/gpu-scheduler-policy": "binpack"}),
     True),
    (lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]), True),
    (lambda p: p["metadata"]["annotations"].update({"example.com/touched": "yes"}), False),
    (lambda p: p.setdefault("status", {}).update(conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]), False),
])
def test_an_update_of_the_pod_itself_never_ends_its_backoff(alloc, update, may_fit):
    """Whatever the update, it waits out its backoff (8 s here) with its failures kept, as in
    kube-scheduler (issue 46, finding 5); one that may make it fit has it decided when the
    backoff ends, though nothing else changed; any other waits for a change of the cluster."""
    alloc.clock = clock = Clock()
    p = add(alloc, sched_pod(whole(2)))
    uid = p["metadata"]["uid"]
    for step in range(4):  # 4 failures: backing off 8 s
        _change_the_state(alloc, step)
        alloc.schedule_pass()
        clock.now += alloc.queue.last_try(uid).backoff
    clock.now -= 1.0  # 7 s into the 8 s
    assert alloc.queue.last_try(uid).failures == 4
    updated = copy.deepcopy(p)
    update(updated)
    updated["metadata"]["resourceVersion"] = "2"
    alloc._apply(1, "pod", "MODIFIED", updated)
    alloc.schedule_pass()
    assert (alloc.queue.last_try(uid).failures, alloc.queue.last_try(uid).backoff) == (4, 8.0)
    clock.now += 1.0  # the backoff is over, the cluster unchanged
    alloc.schedule_pass()
    assert alloc.queue.last_try(uid).failures == (5 if may_fit else 4)
