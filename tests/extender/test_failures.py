"""The extender's boundaries (issue 46, finding 2), in process with a fake API: a verb whose
pod raises while decided answers that pod with an error naming it and what raised (never a
500 and a traceback), an object that raises while indexed is skipped; each is counted on
/metrics and gets one Warning event; the other pods are answered and bound as before."""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import Raising, mt_node, raising, sched_pod, slice_
from tests.extender.messages import args, bind_args, pending
from webhook.extender.cache import WAITING

RAISED = "the extender's {} raised RuntimeError: injected failure"


def errors(client) -> dict[str, float]:
    """mthreads_object_errors_total by stage, from the extender's /metrics."""
    text = client.get("/metrics").data.decode()
    return {s.labels["stage"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "mthreads_object_errors_total"}


def waiting(cache, p: dict) -> dict:
    """`p` as the watch of the pods waiting for our scheduler shows it."""
    cache.apply(WAITING, "ADDED", p)
    return p


@pytest.mark.parametrize("verb, answer", [
    ("filter", lambda who: {"NodeNames": None, "FailedNodes": {},
                            "Error": f"{who}: {RAISED.format('filter')}"}),
    ("prioritize", lambda who: [{"Host": "s4", "Score": 0}, {"Host": "s5", "Score": 0}]),
    ("preempt", lambda who: {"NodeNameToMetaVictims": {}}),
    ("bind", lambda who: {"Error": f"{who}: {RAISED.format('bind')}"}),
])
def test_a_verb_whose_pod_raises_answers_that_pod_and_the_next_pod_is_served(setup, verb, answer,
                                                                              caplog):
    client, cache, api = setup
    caplog.set_level(logging.WARNING)
    bad = waiting(cache, raising(sched_pod(slice_(16, 4), name="bad")))
    if verb == "bind":  # the bind of a pod with no reservation reads the pod
        api.pods[("default", "bad")] = raising(sched_pod(slice_(16, 4), name="bad"))
        api.pods[("default", "bad")]["metadata"] = bad["metadata"]
    body = bind_args(bad, "s4") if verb == "bind" else \
        {"Pod": bad, "NodeNameToVictims": {"s4": {"Pods": []}}} if verb == "preempt" else args(bad)
    r = client.post(f"/{verb}", json=_plain(body))
    who = f"pod default/bad (uid {bad['metadata']['uid']})"
    assert r.status_code == 200 and r.get_json() == answer(who)
    assert errors(client)[verb] == 1
    ext = client.app.ext
    assert [(w[0]["name"], w[1], w[2]) for w in ext.warnings] == \
        [("bad", "SchedulingError", RAISED.format(verb))]
    assert "Traceback" not in caplog.text and who in caplog.text
    # the same pod again: answered, counted, no second event (one a minute per pod and verb)
    assert client.post(f"/{verb}", json=_plain(body)).get_json() == answer(who)
    assert errors(client)[verb] == 2 and len(ext.warnings) == 1
    ok = pending(api, sched_pod(slice_(16, 4), name="ok"))
    assert client.post("/filter", json=args(ok)).get_json()["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(ok, "s4")).get_json() == {"Error": ""}
    assert cache.core.card("s4-mthreads-0").memory_mib == 16 * 512
    assert [b[1].rsplit("/", 2)[-2] for b in api.bindings()] == ["ok"]


@pytest.mark.parametrize("kind, event, obj", [
    ("pod", "ADDED", raising(sched_pod(slice_(8, 2), name="bad", node="s4"))),
    ("pod", "RESET", [raising(sched_pod(slice_(8, 2), name="bad", node="s4"))]),
    (WAITING, "RESET", [raising(sched_pod(slice_(8, 2), name="bad"), "metadata")]),
    ("node", "MODIFIED", raising(mt_node("s4", 2, 96), "status")),
])
def test_an_object_that_raises_while_indexed_is_skipped_and_told_of(setup, kind, event, obj):
    client, cache, api = setup
    client.app.ext.index(kind, event, obj)  # raises nothing
    assert errors(client)["index"] == 1
    named = [w[0]["name"] for w in client.app.ext.warnings]
    assert named == ([] if kind == WAITING else ["bad" if kind == "pod" else "s4"])
    ok = pending(api, sched_pod(slice_(16, 4), name="ok"))
    assert client.post("/filter", json=args(ok)).get_json()["NodeNames"] == ["s4"]
    assert client.post("/bind", json=bind_args(ok, "s4")).get_json() == {"Error": ""}


def _plain(body):
    """A call's body as JSON can carry it (a Raising part is sent as {}: the verb reads the
    pod from the watch or the API, never from the body)."""
    if isinstance(body, Raising):
        return {}
    if isinstance(body, dict):
        return {k: _plain(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_plain(v) for v in body]
    return body
