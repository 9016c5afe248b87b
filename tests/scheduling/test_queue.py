"""The allocator's pending queue (webhook/scheduling/queue.py): its order and each pod's backoff,
as plain data. The loop that uses it is tested in tests/allocator/test_loop.py."""

from __future__ import annotations

import copy

import pytest

from tests.builders import sched_pod, whole
from webhook.scheduling import queue
from webhook.scheduling.queue import PendingQueue


def test_queue_order_is_priority_then_age():
    def at(second, priority=None, name=None):
        p = sched_pod(whole(1, 96), name=name, spec={} if priority is None else {"priority": priority})
        p["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"
        return p
    old, middle, urgent = at(1, name="old"), at(2, 0, name="middle"), at(3, 1000, name="urgent")
    low = at(0, -5, name="low")
    q = PendingQueue(None)
    for p in (old, middle, urgent, low):
        q.upsert(p)
    assert [p["metadata"]["name"] for p in q.due(0)] == ["urgent", "old", "middle", "low"]


@pytest.mark.parametrize("failures, initial, maximum, seconds", [
    (0, 1.0, 10.0, 0.0),  # never failed: no wait
    (1, 1.0, 10.0, 1.0),  # kube-scheduler's podInitialBackoffSeconds
    (2, 1.0, 10.0, 2.0),
    (3, 1.0, 10.0, 4.0),
    (4, 1.0, 10.0, 8.0),
    (5, 1.0, 10.0, 10.0),  # podMaxBackoffSeconds
    (6, 1.0, 10.0, 10.0),
    (10_000, 1.0, 10.0, 10.0),  # no overflow however long it waits
    (3, 0.5, 10.0, 2.0),
    (3, 0.0, 0.0, 0.0),  # no backoff: retried on every change, as before issue 32
    (3, 1.0, 0.0, 0.0),
])
def test_backoff_doubles_from_the_initial_to_the_maximum(failures, initial, maximum, seconds):
    assert queue.backoff_seconds(failures, initial, maximum) == seconds


@pytest.mark.parametrize("last, generation, now, due", [
    # after the first failure (1 s): nothing before it ends, even if the state changed
    (queue.LastTry(5, 100.0, 1, 1.0), 6, 100.5, False),
    (queue.LastTry(5, 100.0, 1, 1.0), 5, 100.5, False),
    (queue.LastTry(5, 100.0, 1, 1.0), 6, 101.0, True),  # over, and the state changed
    (queue.LastTry(5, 100.0, 1, 1.0), 5, 101.0, False),  # over, nothing changed: wait for a change
    (queue.LastTry(5, 100.0, 1, 1.0), 5, 129.9, False),
    (queue.LastTry(5, 100.0, 1, 1.0), 5, 130.0, True),  # ... or for the backstop
    (queue.LastTry(5, 100.0, 5, 10.0), 9, 109.9, False),  # at the maximum
    (queue.LastTry(5, 100.0, 5, 10.0), 9, 110.0, True),
    # no backoff: the rule before issue 32, any change retries at once
    (queue.LastTry(5, 100.0, 3, 0.0), 6, 100.0, True),
    (queue.LastTry(5, 100.0, 3, 0.0), 5, 129.9, False),
    # a failed write: a flat pause, changes or not
    (queue.LastTry(None, 100.0), 6, 101.9, False),
    (queue.LastTry(None, 100.0), 6, 102.0, True),
])
def test_a_pod_is_due_after_its_backoff_on_a_change_or_at_the_backstop(last, generation, now, due):
    assert last.due(generation, now) is due


def test_each_failed_try_doubles_the_backoff():
    last = None
    seen = []
    for i in range(6):
        last = queue.failed_try(last, generation=i, now=10.0 * i, initial=1.0, maximum=10.0)
        seen.append((last.failures, last.backoff, last.generation, last.at))
    assert seen == [(1, 1.0, 0, 0.0), (2, 2.0, 1, 10.0), (3, 4.0, 2, 20.0), (4, 8.0, 3, 30.0),
                    (5, 10.0, 4, 40.0), (6, 10.0, 5, 50.0)]
    after_write = queue.failed_try(queue.LastTry(None, 3.0), 7, 4.0, 1.0, 10.0)
    assert (after_write.failures, after_write.backoff) == (1, 1.0)


def _set_annotation(key, value):
    return lambda p: p["metadata"]["annotations"].update({key: value})


# (the update, whether it may make the pending pod fit)
UPDATES = [
    (lambda p: p["status"].update(conditions=[{"type": "PodScheduled", "status": "False"}]), False),
    (lambda p: p["metadata"].update(resourceVersion="99", managedFields=[{"manager": "x"}]), False),
    (_set_annotation("example.com/touched", "yes"), False),
    (_set_annotation("hami.io/mthreads-vgpu-devices-to-allocate", "x"), False),
    (lambda p: p["spec"]["containers"][0].update(image="busybox:2"), False),
    (lambda p: p["spec"].update(activeDeadlineSeconds=30), False),
    (_set_annotation("hami.io/node-scheduler-policy", "spread"), True),
    (_set_annotation("hami.io/gpu-scheduler-policy", "binpack"), True),
    (_set_annotation("mthreads.ai/use-gpuuuid", "n0-mthreads-0"), True),
    (_set_annotation("mthreads.ai/nouse-gpuuuid", "n0-mthreads-0"), True),
    (_set_annotation("mthreads.com/card-model", "MTT-S4000"), True),
    (lambda p: p["metadata"].setdefault("labels", {}).update(app="web"), True),
    (lambda p: p["spec"].update(tolerations=[{"operator": "Exists"}]), True),
    (lambda p: p["spec"].update(schedulingGates=[]), True),
    (lambda p: p["spec"]["containers"][0]["resources"].update(requests={"cpu": "1"}), True),
]


@pytest.mark.parametrize("change, may_fit", UPDATES)
def test_only_an_update_of_what_a_decision_reads_may_make_the_pod_fit(change, may_fit):
    old = sched_pod(whole(1))
    old.setdefault("status", {})
    new = copy.deepcopy(old)
    change(new)
    assert queue.may_fit_now(old, new) is may_fit


def test_only_our_schedulers_live_pods_wait():
    q = PendingQueue("hami-scheduler")
    mine, theirs = sched_pod(whole(1)), sched_pod(whole(1), spec={"schedulerName": "default"})
    leaving = sched_pod(whole(1))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    for p in (mine, theirs, leaving):
        q.upsert(p)
    assert [p["metadata"]["uid"] for p in q.pods()] == [mine["metadata"]["uid"]]
    q.upsert(dict(mine, metadata=dict(mine["metadata"], deletionTimestamp="2026-01-01T00:00:01Z")))
    assert len(q) == 0  # now leaving: out


@pytest.mark.parametrize("change, may_fit", UPDATES)
def test_an_update_never_shortens_the_backoff(change, may_fit):
    """kube-scheduler keeps an updated pod's attempts and its backoff: whoever patches a pod
    every 100 ms gets no decision per patch. An update that may make it fit has it tried when
    the backoff ends, though the cluster did not change meanwhile."""
    now = [100.0]
    q = PendingQueue(None, clock=lambda: now[0])
    p = sched_pod(whole(1))
    q.upsert(p)
    uid = p["metadata"]["uid"]
    for _ in range(3):
        q.unschedulable(uid, generation=1)
    backoff = q.last_try(uid).backoff
    assert (q.last_try(uid).failures, backoff) == (3, 4.0)
    updated = copy.deepcopy(p)
    change(updated)
    for _ in range(40):  # an update every 100 ms while it backs off
        q.upsert(copy.deepcopy(updated))
        assert list(q.due(1)) == [] and list(q.due(2)) == []
        now[0] += backoff / 50
    assert q.get(uid) == updated  # the pod kept is the newest
    now[0] = 100.0 + backoff
    assert [x["metadata"]["uid"] for x in q.due(1)] == ([uid] if may_fit else [])
    assert [x["metadata"]["uid"] for x in q.due(2)] == [uid]  # the cluster changed: due
    q.unschedulable(uid, generation=2)
    assert (q.last_try(uid).failures, q.last_try(uid).backoff, q.last_try(uid).pod_changed) == \
        (4, 8.0, False)


def test_a_relist_keeps_the_backoff_of_the_pods_still_listed():
    now = [100.0]
    q = PendingQueue(None, clock=lambda: now[0])
    kept, gone = sched_pod(whole(1), name="kept"), sched_pod(whole(1), name="gone")
    for p in (kept, gone):
        q.upsert(p)
        q.unschedulable(p["metadata"]["uid"], generation=1)
        q.unschedulable(p["metadata"]["uid"], generation=1)
    labelled = copy.deepcopy(kept)
    labelled["metadata"]["labels"] = {"app": "web"}
    q.relist([labelled])
    assert [p["metadata"]["name"] for p in q.pods()] == ["kept"]
    assert q.last_try(gone["metadata"]["uid"]) is None
    last = q.last_try(kept["metadata"]["uid"])
    assert (last.failures, last.backoff, last.pod_changed) == (2, 2.0, True)
    assert list(q.due(1)) == []
    now[0] += 2.0
    assert [p["metadata"]["name"] for p in q.due(1)] == ["kept"]


def test_a_refused_write_waits_a_flat_pause():
    now = [100.0]
    q = PendingQueue(None, clock=lambda: now[0])
    p = sched_pod(whole(1))
    q.write_failed(p)
    assert list(q.due(0)) == []
    now[0] += queue.ERROR_RETRY
    assert list(q.due(0)) == [p]


def test_a_gated_pod_waits_undecided_until_its_gates_are_removed():
    gated = sched_pod(whole(1, 96), name="gated", spec={"schedulingGates": [{"name": "kueue"}]})
    free = sched_pod(whole(1, 96), name="free")
    q = PendingQueue(None)
    q.upsert(gated)
    q.upsert(free)
    assert [p["metadata"]["name"] for p in q.due(0)] == ["free"]
    assert "gated" in [p["metadata"]["name"] for p in q.pods()]  # still waiting here
    opened = copy.deepcopy(gated)
    opened["spec"]["schedulingGates"] = []
    q.upsert(opened)
    assert sorted(p["metadata"]["name"] for p in q.due(0)) == ["free", "gated"]
