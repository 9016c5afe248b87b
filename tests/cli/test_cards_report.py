"""The `cards` table and JSON from plain nodes, pods and events (the cluster test runs the command)."""

from __future__ import annotations

import json

import pytest

from tests.builders import bound_slice, mt_node, plain, slice_
from tests.builders import sched_pod as pod
from webhook.cli.cards_report import NO_REASON, as_json, report, table
from webhook.model.config import MthreadsConfig

WHY = "0/2 nodes are available: 2 CardInsufficientMemory."


def event(p, message, at="2026-01-01T00:00:00Z"):
    return {"reason": "FailedScheduling", "message": message, "lastTimestamp": at,
            "involvedObject": {"uid": p["metadata"]["uid"]}}


@pytest.fixture
def cluster():
    nodes = [mt_node("gpu-s4", cards=2, units=96), mt_node("gpu-s5", cards=1, units=160),
             mt_node("cpu-only", cards=0),
             mt_node("odd", capacity={"mthreads.com/sgpu-core": "20", "mthreads.com/sgpu-memory": "96"})]
    big = pod(slice_(160, 16), name="big", namespace="team")
    waiting = pod(slice_(2), name="fresh", namespace="team")
    pods = [bound_slice("a", "gpu-s4", "gpu-s4-mthreads-0,Mthreads,16384,8:;"),
            bound_slice("b", "gpu-s4", "gpu-s4-mthreads-0,Mthreads,4096,4:;"),
            bound_slice("done", "gpu-s4", "gpu-s4-mthreads-1,Mthreads,49152,16:;", phase="Succeeded"),
            bound_slice("c", "gpu-s5", "gpu-s5-mthreads-0,Mthreads,81920,16:;", namespace="ml"),
            big, waiting, pod(plain(), name="web", namespace="team")]
    events = [event(big, "old message", "2025-01-01T00:00:00Z"), event(big, WHY)]
    return nodes, pods, events


def test_table_one_line_per_card_then_pending(cluster):
    out = table(report(*cluster, MthreadsConfig()))
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert lines[0].split() == ["NODE", "CARD", "MODEL", "MEMORY", "CORES", "SHARED", "PODS"]
    assert lines[1].split() == ["gpu-s4", "gpu-s4-mthreads-0", "MTT-S4000", "20/48Gi", "12/16",
                                "2/16", "team/a,", "team/b"]
    assert lines[2].split() == ["gpu-s4-mthreads-1", "MTT-S4000", "0/48Gi", "0/16", "0/16", "-"]  # node once
    assert lines[3].split() == ["gpu-s5", "gpu-s5-mthreads-0", "MTT-S5000", "80/80Gi", "16/16", "1/16",
                                "ml/c"]
    assert "node odd: no usable cards: mthreads.com/sgpu-core=20 is not a multiple of 16" in out
    assert "PENDING MTHREADS PODS (2)" in out
    assert f"team/big: {WHY}" in out  # the latest event's message
    assert f"team/fresh: {NO_REASON}" in out
    assert "team/web" not in out and "done" not in out  # not Mthreads; ended


def test_node_filter(cluster):
    r = report(*cluster, MthreadsConfig(), node="gpu-s5")
    assert [v.card.id for v in r.cards] == ["gpu-s5-mthreads-0"]


def test_json_is_complete(cluster):
    doc = json.loads(as_json(report(*cluster, MthreadsConfig())))
    assert doc["cards"][0] == {"node": "gpu-s4", "card": "gpu-s4-mthreads-0", "index": 0,
                               "model": "MTT-S4000", "memoryUsedMiB": 20480,
                               "memoryTotalMiB": 49152, "coresUsed": 12, "coresTotal": 16,
                               "containers": 2, "containersLimit": 16, "cordoned": False,
                               "pods": ["team/a", "team/b"]}
    assert {p["pod"]: p["reason"] for p in doc["pending"]} == {"team/big": WHY,
                                                               "team/fresh": NO_REASON}
    assert doc["problems"] == [{"node": "odd", "problem": "mthreads.com/sgpu-core=20 is not a "
                                                          "multiple of 16"}]


def test_many_pods_wrap_within_80_columns_every_one_shown():
    nodes = [mt_node("n", cards=1)]
    pods = [bound_slice(f"worker-{i:02d}", "n", "n-mthreads-0,Mthreads,1024,0:;") for i in range(20)]
    out = table(report(nodes, pods, [], MthreadsConfig()))
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert lines[1].split()[:6] == ["n", "n-mthreads-0", "MTT-S4000", "20/48Gi", "0/16", "20/16"]
    column = lines[0].index("PODS")
    cell = [line[column:] for line in lines[1:] if line[column:].startswith("team/")]
    assert len(cell) > 1 and all(line[:column].strip() == "" for line in lines[2:len(cell) + 1])
    assert " ".join(cell).split(", ") == [f"team/worker-{i:02d}" for i in range(20)]


def test_a_long_reason_wraps_within_80_columns():
    p = pod(slice_(2), name="p", namespace="ns")
    why = "0/40 nodes are available: " + ", ".join(f"{i} node(s) had untolerated taint" for i in range(8))
    out = table(report([], [p], [event(p, why)], MthreadsConfig()))
    assert all(len(line) <= 80 for line in out.splitlines())
    assert " ".join(out.split()).find(why) > 0


def test_an_empty_cluster_says_so():
    out = table(report([], [], [], MthreadsConfig()))
    assert out == "no Mthreads cards found\n\nno pending Mthreads pods\n"


def test_long_node_names_give_up_the_node_column():
    name = "ip-10-0-12-34.ec2.internal"
    out = table(report([mt_node(name, cards=1)],
                       [bound_slice("a", name, f"{name}-mthreads-0,Mthreads,1024,1:;")], [], MthreadsConfig()))
    head, row = out.splitlines()[:2]
    assert head.split() == ["CARD", "MODEL", "MEMORY", "CORES", "SHARED", "PODS"]
    assert row.split() == [f"{name}-mthreads-0", "MTT-S4000", "1/48Gi", "1/16", "1/16", "team/a"]
    assert len(row) <= 80


def test_a_gated_pod_is_shown_gated_not_waiting_for_the_allocator():
    p = pod(slice_(8), name="queued", spec={"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]})
    r = report([mt_node("n1")], [p], [], MthreadsConfig())
    assert [(x.pod, x.reason) for x in r.pending] == [
        ("default/queued",
         "gated: not scheduled until its scheduling gates are removed (kueue.x-k8s.io/admission)")]


LONG_NS, LONG_NAME = "e2e-cards-command-shows-" + "n" * 36, "a-pod-with-a-name-as-long-as-" + "p" * 31


def test_long_namespaces_and_names_are_never_cut():
    """60-character namespaces and names: the node column gives way first, then a name too
    long for what is left stands whole on a line of its own, past 80 columns; the other lines
    still fit; the pending pod's name is not broken at a hyphen or anywhere."""
    assert len(LONG_NS) == len(LONG_NAME) == 60
    nodes = [mt_node("gpu-s4", cards=2)]
    pods = [bound_slice(LONG_NAME, "gpu-s4", "gpu-s4-mthreads-0,Mthreads,1024,1:;", namespace=LONG_NS),
            bound_slice("short", "gpu-s4", "gpu-s4-mthreads-0,Mthreads,1024,1:;"),
            pod(slice_(2), name=LONG_NAME + "-2", namespace=LONG_NS)]
    out = table(report(nodes, pods, [], MthreadsConfig()))
    lines = out.splitlines()
    key = f"{LONG_NS}/{LONG_NAME}"
    assert lines[0].split()[0] == "CARD"  # the node column left out first
    (row,) = [line for line in lines if key + "," in line]
    assert row.split() == ["gpu-s4-mthreads-0", "MTT-S4000", "2/48Gi", "2/16", "2/16", key + ","]
    assert lines[2].split() == ["team/short"]  # the cell goes on below, in its column
    assert all(len(line) <= 80 for line in lines if key not in line), out
    assert "team/short" in out
    assert f"{LONG_NS}/{LONG_NAME}-2: {NO_REASON}" in " ".join(out.split())
    assert any(line.startswith(f"{LONG_NS}/{LONG_NAME}-2:") for line in lines), out  # whole


def test_cordoned_cards_are_marked_and_the_containers_counted_against_the_limit():
    node = mt_node("n", cards=2, annotations={"hami.io/device-cordon": "n-mthreads-1",
                                              "mthreads.com/max-instances-per-card": "4"})
    pods = [bound_slice("a", "n", "n-mthreads-1,Mthreads,1024,0:;n-mthreads-1,Mthreads,1024,0:;")]
    r = report([node], pods, [], MthreadsConfig())
    lines = table(r).splitlines()
    assert lines[2].split() == ["n-mthreads-1", "(cordoned)", "MTT-S4000", "2/48Gi", "0/16", "2/4", "team/a"]
    assert lines[1].split()[-2:] == ["0/4", "-"]
    doc = json.loads(as_json(r))
    assert [(c["cordoned"], c["containers"], c["containersLimit"]) for c in doc["cards"]] == [
        (False, 0, 4), (True, 2, 4)]


def test_wide_keeps_every_column_and_puts_each_card_on_one_line():
    nodes = [mt_node("ip-10-0-12-34.ec2.internal", cards=1)]
    pods = [bound_slice(f"worker-{i:02d}", nodes[0]["metadata"]["name"],
                        "ip-10-0-12-34.ec2.internal-mthreads-0,Mthreads,1024,0:;") for i in range(12)]
    p = pod(slice_(2), name="waits", namespace="ns")
    why = "0/40 nodes are available: " + ", ".join(f"{i} node(s) had untolerated taint" for i in range(8))
    lines = table(report(nodes, pods + [p], [event(p, why)], MthreadsConfig()), width=None).splitlines()
    assert lines[0].split() == ["NODE", "CARD", "MODEL", "MEMORY", "CORES", "SHARED", "PODS"]
    assert lines[1].split(", ")[-1] == "team/worker-11" and lines[2] == ""
    assert f"ns/waits: {why}" in lines
