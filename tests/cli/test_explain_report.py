"""`cards explain` and `cards what-if`, the pure part: the text and JSON from plain lists, and
the pod of a file as the webhook would let it in (the cluster test runs the commands)."""

from __future__ import annotations

import json

import pytest

from tests.builders import container, mt_node, plain, slice_
from tests.builders import pod as user_pod
from tests.builders import sched_pod as pod
from webhook.base.startup import StartupError
from webhook.cli.explain_report import as_json as explain_json
from webhook.cli.explain_report import denied, explain_pod, text
from webhook.cli.what_if import UID, admitted, read_pod
from webhook.model import annotations as keys
from webhook.model.config import Config, MthreadsConfig

CONFIG = Config(mthreads=MthreadsConfig(memory_per_card=(96, 160)))
LONG_NS, LONG_NAME = "e2e-cards-explain-shows-" + "n" * 36, "a-pod-whose-name-is-as-long-as-" + "p" * 29


def holder(name, card, units, priority=0, namespace="team"):
    node = card.rsplit("-mthreads-", 1)[0]
    return pod(slice_(units, 4), name=name, namespace=namespace, node=node, phase="Running",
               spec={"priority": priority},
               annotations={keys.ALLOCATED: f"{card},Mthreads,{units * 512},4:;"})


@pytest.fixture
def fragmented():
    nodes = [mt_node("n1", 2), mt_node("n2", 1, taints=[{"key": "gpu", "effect": "NoSchedule"}])]
    pods = [holder("a", "n1-mthreads-0", 32), holder("b", "n1-mthreads-0", 16, 5),
            holder("c", "n1-mthreads-0", 8), holder(LONG_NAME, "n1-mthreads-1", 56, 0, LONG_NS),
            holder("gone", "n1-mthreads-1", 96, 0) | {"status": {"phase": "Succeeded"}}]
    return nodes, pods


def test_text_names_the_cards_and_the_victims_within_80_columns(fragmented):
    waiting = pod(slice_(64, 4), name="big", namespace="team", spec={"priority": 100})
    out = text(explain_pod(waiting, *fragmented, CONFIG))
    lines = out.splitlines()
    assert lines[0] == ("team/big does not fit: 0/2 nodes are available: 1 CardInsufficientMemory, 1")
    assert "n1: CardInsufficientMemory" in lines
    assert "    card 0: 40 of 96 units free, the pod needs 64" in lines
    assert "    card 1: 40 of 96 units free, the pod needs 64" in lines  # the ended pod holds none
    assert "n2: node(s) had untolerated taint" in lines
    victims = " ".join(out.split("to make room", 1)[1].split())
    assert victims.startswith("(a dry run: nothing is evicted): remove 1 pod(s) on n1: ")
    assert f"{LONG_NS}/{LONG_NAME} (priority 0)" in victims
    assert any(line.strip().startswith(f"{LONG_NS}/{LONG_NAME}") for line in lines)  # whole
    assert all(len(line) <= 80 for line in lines if LONG_NAME not in line), out


def test_json_has_everything(fragmented):
    waiting = pod(slice_(64, 4), name="big", namespace="team", spec={"priority": 100})
    doc = json.loads(explain_json(explain_pod(waiting, *fragmented, CONFIG)))
    assert doc["pod"] == "team/big" and doc["fits"] is False and doc["priority"] == 100
    n1 = next(n for n in doc["nodes"] if n["node"] == "n1")
    assert [c["detail"] for c in n1["cardReasons"]] == ["40 of 96 units free, the pod needs 64"] * 2
    assert doc["makeRoom"]["node"] == "n1" and doc["makeRoom"]["dryRun"] is True
    assert [v["pod"] for v in doc["makeRoom"]["victims"]] == [f"{LONG_NS}/{LONG_NAME}"]


def test_a_bound_pod_has_nothing_to_explain(fragmented):
    x = explain_pod(fragmented[1][0], *fragmented, CONFIG)
    assert text(x) == "team/a is bound to n1: nothing to explain\n"
    assert json.loads(explain_json(x))["boundTo"] == "n1"


def test_notes_for_another_scheduler_and_gates(fragmented):
    p = pod(slice_(8, 4), name="other", namespace="team",
            spec={"schedulerName": "default-scheduler", "schedulingGates": [{"name": "q"}]})
    out = text(explain_pod(p, *fragmented, CONFIG))
    assert out.startswith("team/other fits: the allocator would bind it to n1 (n1-mthreads-")
    flat = " ".join(out.split())
    assert "note: it waits for the scheduler 'default-scheduler', not 'hami-scheduler'" in flat
    assert "note: gated: not scheduled until its scheduling gates are removed (q)" in flat


def test_an_invalid_pod_says_the_rule(fragmented):
    out = text(explain_pod(pod(slice_(3), name="bad", namespace="team"), *fragmented, CONFIG))
    assert out.startswith("team/bad is never placed: InvalidRequest: the pod breaks admission rule 2")


def test_plain_pods_are_not_made_room_for_by_removing_card_holders(fragmented):
    out = text(explain_pod(pod(plain(cpu="100"), name="cpu", namespace="team"), *fragmented, CONFIG))
    assert "n1: Insufficient cpu" in out
    assert "to make room: no cards are asked for" in out


# --- what-if: the file, and the webhook's part ------------------------------------------------

def write(tmp_path, text_):
    f = tmp_path / "pod.yaml"
    f.write_text(text_)
    return str(f)


@pytest.mark.parametrize("content, says", [
    ("kind: Pod\nspec: [\n", "not valid YAML at line"),
    ("", "holds 0 documents; give one Pod"),
    ("kind: Pod\n---\nkind: Pod\n", "holds 2 documents; give one Pod"),
    ("kind: Deployment\nspec: {}\n", "not a Pod (kind: Deployment)"),
    ("- a\n- b\n", "not a Pod (kind: list)"),
    ("kind: Pod\nmetadata: {name: p}\n", "the Pod has no spec.containers"),
    ("kind: Pod\nspec: {containers: []}\n", "the Pod has no spec.containers"),
    ("kind: Pod\nmetadata: [1]\nspec: {containers: [{name: a}]}\n", "metadata is not a mapping"),
    ("kind: Pod\nspec: {containers: [{name: a}], volumes: x}\n", "spec.volumes is not a list"),
    ("kind: Pod\nspec: {containers: [{name: a}], volumes: [x]}\n", "spec.volumes[0] is not a mapping"),
    ("kind: Pod\nspec: {containers: [{name: a}], volumes: [{name: d, persistentVolumeClaim: c}]}\n",
     "spec.volumes[0].persistentVolumeClaim is not a mapping"),
])
def test_a_bad_file_is_one_clear_error(tmp_path, content, says):
    path = write(tmp_path, content)
    with pytest.raises(StartupError) as e:
        read_pod(path)
    assert str(e.value).startswith(f"cards what-if: {path}: {says}"), str(e.value)


def test_a_missing_file(tmp_path):
    with pytest.raises(StartupError, match="cards what-if: .*nope.yaml: cannot read: No such file"):
        read_pod(str(tmp_path / "nope.yaml"))


def test_the_file_s_pod_is_mutated_as_the_webhook_would(tmp_path):
    doc = user_pod(container("train", count=2), name="two-cards")
    doc["metadata"].pop("namespace")
    got = admitted(read_pod(write(tmp_path, json.dumps(doc))), CONFIG)
    assert isinstance(got, dict)
    assert got["metadata"]["namespace"] == "default" and got["metadata"]["uid"] == UID
    assert got["spec"]["schedulerName"] == "hami-scheduler"
    limits = got["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["mthreads.com/sgpu-memory"], limits["mthreads.com/sgpu-core"]) == ("192", "32")
    assert got["metadata"]["annotations"][keys.TO_ALLOCATE] == \
        ",Mthreads,49152,16:,Mthreads,49152,16:;"
    assert doc["spec"]["containers"][0]["resources"]["limits"] == {"mthreads.com/vgpu": "2"}  # a copy


def test_a_pod_the_webhook_denies_is_the_answer():
    got = admitted(user_pod(container("train", count=1, memory=3)), CONFIG)
    assert got == ('the webhook would deny it: container "train": mthreads.com/sgpu-memory=3 is '
                   'not valid; valid values are 2, 4, 8, 16, 32, 64, 96, 128, 160 (memoryPerCard '
                   '[96, 160])')
    assert denied("f.yaml", got, False).startswith("f.yaml: the webhook would deny it: ")
    assert json.loads(denied("f.yaml", got, True)) == {"file": "f.yaml", "denied": got}
