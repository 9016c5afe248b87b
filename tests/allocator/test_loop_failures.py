"""The allocator's boundaries (issue 46, finding 2), with a fake API: a pod whose decision
raises and objects that raise while indexed are told of (a log line, one Warning event, the
counter) and skipped; the pods around them are decided and bound, and the pod that raised is
backed off as one that did not fit."""

from __future__ import annotations

import logging

import pytest

from tests.allocator import test_loop
from tests.allocator.test_loop import add, settle
from tests.builders import mt_node, raising, sched_pod, slice_
from tests.harness.wait import wait_for
from webhook.allocator.loop import Allocator

alloc = test_loop.alloc  # the allocator on a fake API, with node n0 (2 cards) listed


def errors(a: Allocator, stage: str) -> float:
    return a.metrics.registry.get_sample_value(
        "mthreads_object_errors_total", {"frontend": "allocator", "stage": stage})


def warnings(a: Allocator) -> list[tuple[str, str, str]]:
    """(reason, object name, message) of the Warning events other than FailedScheduling."""
    wait_for(a.reporter.idle, 10, what="the reports")
    return [(c.body["reason"], c.body["involvedObject"]["name"], c.body["message"])
            for c in list(a.api.calls) if c.method == "POST" and c.path.endswith("/events")
            and c.body["reason"] != "FailedScheduling"]


def test_a_pod_whose_decision_raises_is_backed_off_and_the_others_bind(alloc, caplog):
    caplog.set_level(logging.WARNING)
    add(alloc, sched_pod(slice_(8, 2), name="before"))
    bad = add(alloc, raising(sched_pod(slice_(8, 2), name="bad")))
    add(alloc, sched_pod(slice_(8, 2), name="after"))
    assert alloc.schedule_pass() == 2
    settle(alloc)
    assert sorted(path.rsplit("/", 2)[-2] for _, path, _ in alloc.api.bindings()) == \
        ["after", "before"]
    uid = bad["metadata"]["uid"]
    assert alloc.queue.last_try(uid).failures == 1  # backed off as a pod that did not fit
    assert alloc.schedule_pass() == 0 and alloc.queue.last_try(uid).failures == 1  # not again at once
    assert errors(alloc, "decide") == 1 and errors(alloc, "index") == 0
    wait_for(lambda: warnings(alloc), 10, what="the Warning event")
    assert warnings(alloc) == [("SchedulingError", "bad", "the allocator's decide raised "
                                "RuntimeError: injected failure")]
    (line,) = [r.getMessage() for r in caplog.records if "injected failure" in r.getMessage()]
    assert f"pod default/bad (uid {uid})" in line and "Traceback" not in caplog.text
    assert [p["metadata"]["name"] for p in alloc.queue.pods()] == ["bad"]


BAD_BOUND = raising(sched_pod(slice_(8, 2), name="bad", node="n0"))


@pytest.mark.parametrize("kind, event, obj, told", [
    ("pod", "ADDED", BAD_BOUND, ["IndexingError"]),
    ("pod", "RESET", [BAD_BOUND], ["IndexingError"]),
    ("pod", "RESET", [raising(sched_pod(slice_(8, 2), name="bad"), "metadata")], []),  # no name
    ("node", "MODIFIED", raising(mt_node("bad", 1, 96), "status"), ["IndexingError"]),
    ("node", "RESET", [raising(mt_node("bad", 1, 96), "status"), mt_node("n0", 2, 96)],
     ["IndexingError"]),
], ids=["bound pod", "bound pod in a list", "unnamed pod in a list", "node", "node in a list"])
def test_an_object_that_raises_while_indexed_is_told_of_and_the_others_bind(alloc, kind, event,
                                                                            obj, told):
    others = [sched_pod(slice_(8, 2), name=f"ok{i}") for i in range(2)]
    for p in others:
        alloc.api.pods[("default", p["metadata"]["name"])] = p
    if kind == "pod" and event == "RESET":  # the pods around it in the same list
        alloc._apply(1, kind, event, [others[0], *obj, others[1]])
    else:
        alloc._apply(1, kind, event, obj)
        for p in others:
            alloc._apply(1, "pod", "ADDED", p)
    assert errors(alloc, "index") == 1  # told of once, though the queue refused it too
    assert alloc.schedule_pass() == 2  # the pods around it: decided and bound
    settle(alloc)
    assert len(alloc.api.bindings()) == 2
    if told:
        wait_for(lambda: warnings(alloc), 10, what="the Warning event")
    assert [(reason, name) for reason, name, _ in warnings(alloc)] == [(r, "bad") for r in told]
