"""`mthreads-webhook cards` as a real command against the test API server, on a known fleet."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import kubernetes.client as k
import pytest
import yaml

from tests.builders import slice_
from tests.harness.kube import ADMIN, ALICE, ensure_namespace, free_ports, read_pod
from tests.metrics.cluster import create, pod, wait_bound, wait_unschedulable

CLI = [sys.executable, "-m", "webhook.cli", "cards"]


def cards(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"})


@pytest.mark.cluster
def test_table_and_json_on_a_known_fleet(kube_cluster, admin, fleet, namespace, start_allocator):
    s4, = fleet(2, 96)
    s5, = fleet(1, 160)
    start_allocator()
    a = create(admin, namespace, pod(slice_(32, 8, name="c"), name="a"))
    full = create(admin, namespace, pod(slice_(160, 16, name="c"), name="full"))  # before "waits"
    waits = create(admin, namespace, pod(slice_(160, 16, name="c"), name="waits"))
    card_a = wait_bound(admin, namespace, a)["metadata"]["annotations"][
        "hami.io/mthreads-vgpu-devices-allocated"].split(",")[0]
    wait_bound(admin, namespace, full)
    why = wait_unschedulable(admin, namespace, waits)["message"]
    kubeconfig = str(kube_cluster.kubeconfig(ADMIN))

    out = cards("--kubeconfig", kubeconfig, "--node", s4)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), out.stdout
    # the node column gives way to long node names (the card id begins with the node's name)
    header = lines[0].split()
    assert header[-6:] == ["CARD", "MODEL", "MEMORY", "CORES", "SHARED", "PODS"] and header[:-6] in ([], ["NODE"])
    rows = {line.split()[-6]: line for line in lines[1:3]}  # by card id
    idle = f"{s4}-mthreads-{1 - int(card_a[-1])}"
    assert rows[card_a].split()[-5:] == ["MTT-S4000", "16/48Gi", "8/16", "1/16", f"{namespace}/a"]
    assert rows[idle].split()[-5:] == ["MTT-S4000", "0/48Gi", "0/16", "0/16", "-"]
    assert s5 not in out.stdout.split("PENDING")[0]  # --node: that node's cards only
    assert "PENDING MTHREADS PODS" in out.stdout
    assert " ".join(out.stdout.split()).count(f"{namespace}/waits: {why}") == 1

    doc = json.loads(cards("--kubeconfig", kubeconfig, "-o", "json").stdout)
    mine = {c["card"]: c for c in doc["cards"] if c["node"] in (s4, s5)}
    assert mine[f"{s5}-mthreads-0"] == {
        "node": s5, "card": f"{s5}-mthreads-0", "index": 0, "model": "MTT-S5000",
        "memoryUsedMiB": 81920, "memoryTotalMiB": 81920, "coresUsed": 16, "coresTotal": 16,
        "containers": 1, "containersLimit": 16, "cordoned": False, "pods": [f"{namespace}/full"]}
    assert mine[card_a]["memoryUsedMiB"] == 16384 and mine[card_a]["coresUsed"] == 8
    assert {"pod": f"{namespace}/waits", "reason": why} in doc["pending"]

    # KUBECONFIG is found as kubectl finds it
    env_out = subprocess.run([*CLI, "-o", "json"], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                                  "KUBECONFIG": kubeconfig})
    assert env_out.returncode == 0 and json.loads(env_out.stdout)["cards"], env_out.stderr

    # a user who may not list nodes gets one line, not a stack trace
    denied = cards("--kubeconfig", str(kube_cluster.kubeconfig(ALICE)))
    assert denied.returncode == 1 and denied.stderr.count("\n") == 1, denied.stderr
    assert "cards: GET /api/v1/nodes: 403" in denied.stderr


def test_one_line_when_no_cluster_answers(tmp_path):
    port = free_ports(1)[0]  # nothing listens there
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    out = cards("--kubeconfig", str(cfg))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("mthreads-webhook: cards: "), out.stderr
    assert f"127.0.0.1:{port}" in out.stderr or "refused" in out.stderr.lower(), out.stderr


@pytest.mark.parametrize("args, says", [
    (("--kubeconfig", "/nonexistent/kubeconfig"), "--kubeconfig /nonexistent/kubeconfig: no such file"),
    ((), "no cluster to talk to; tried "),  # no KUBECONFIG, no in-cluster config, no ~/.kube/config
])
def test_one_line_when_there_is_no_config(args, says):
    out = cards(*args)
    assert out.returncode == 1 and out.stderr.count("\n") == 1 and says in out.stderr, out.stderr


def explain(*args: str, kubeconfig: str) -> subprocess.CompletedProcess:
    return cards(*args, "--kubeconfig", kubeconfig)


@pytest.mark.cluster
def test_explain_names_the_fragmented_cards_and_victims_whose_removal_lets_it_bind(
        kube_cluster, admin, fleet, namespace, start_allocator, priorities, tmp_path):
    """Two S4000 cards with 40 units free each and a 64-unit slice of high priority: it waits
    (the allocator does not preempt); `cards explain` names both cards in figures and one
    low-priority pod whose removal makes room, evicting nothing; `cards what-if` of the same
    pod in a file says the same; the test deletes the victim and the pod binds."""
    node, = fleet(2, 96)
    start_allocator()
    low = {"priorityClassName": priorities["low"], "nodeSelector": fleet.selector}
    holders = []
    for i, units in enumerate((32, 32, 16, 16, 8, 8)):  # spread: one of each size on each card
        p = pod(slice_(units, 2, name="c"), name=f"low-{i}")
        p["spec"].update(low)
        holders.append(create(admin, namespace, p))
        wait_bound(admin, namespace, holders[-1])
    big = pod(slice_(64, 4, name="c"), name="big")
    big["spec"].update({"priorityClassName": priorities["high"], "nodeSelector": fleet.selector})
    create(admin, namespace, big)
    assert "CardInsufficientMemory" in wait_unschedulable(admin, namespace, "big")["message"]
    kubeconfig = str(kube_cluster.kubeconfig(ADMIN))

    out = explain("explain", f"{namespace}/big", kubeconfig=kubeconfig)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{namespace}/big does not fit: 0/")
    assert f"{node}: CardInsufficientMemory" in lines
    assert "    card 0: 40 of 96 units free, the pod needs 64" in lines
    assert "    card 1: 40 of 96 units free, the pod needs 64" in lines
    assert all(len(line) <= 80 for line in lines), out.stdout
    flat = " ".join(out.stdout.split())
    assert f"to make room (a dry run: nothing is evicted): remove 1 pod(s) on {node}: " in flat
    doc = json.loads(explain("explain", f"{namespace}/big", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert doc["fits"] is False and doc["priority"] == 1000
    (victim,) = doc["makeRoom"]["victims"]
    assert victim["priority"] == 10 and victim["pod"] in {f"{namespace}/low-0", f"{namespace}/low-1"}
    assert f"{victim['pod']} (priority 10)" in flat
    for name in holders:  # a dry run
        p = read_pod(admin, namespace, name)
        assert p["spec"]["nodeName"] == node and not p["metadata"].get("deletionTimestamp")

    # the same pod in a file, never created: the webhook's form, the class's priority
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big-too", "namespace": namespace},
        "spec": {"priorityClassName": priorities["high"], "nodeSelector": fleet.selector,
                 "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {
                     "mthreads.com/vgpu": 1, "mthreads.com/sgpu-memory": 64, "mthreads.com/sgpu-core": 4}}}]}}))
    what_if = json.loads(explain("what-if", str(spec), "-o", "json", kubeconfig=kubeconfig).stdout)
    assert what_if["pod"] == f"{namespace}/big-too" and what_if["priority"] == 1000
    assert what_if["fits"] is False and len(what_if["makeRoom"]["victims"]) == 1
    assert [c["detail"] for n in what_if["nodes"] if n["node"] == node for c in n["cardReasons"]] == \
        ["40 of 96 units free, the pod needs 64"] * 2
    assert k.CoreV1Api(admin).list_namespaced_pod(namespace, field_selector="metadata.name=big-too").items == []

    k.CoreV1Api(admin).delete_namespaced_pod(victim["pod"].split("/")[1], namespace, grace_period_seconds=0)
    assert wait_bound(admin, namespace, "big")["spec"]["nodeName"] == node
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"kind": "Pod", "metadata": {"name": "small"}, "spec": {
        "nodeSelector": fleet.selector, "containers": [{"name": "c", "resources": {"limits": {
            "mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"}}}]}}))
    fits = explain("what-if", str(small), kubeconfig=kubeconfig)
    assert fits.returncode == 0 and " ".join(fits.stdout.split()).startswith(
        f"default/small fits: the allocator would bind it to {node} ({node}-mthreads-"), fits.stdout


@pytest.mark.cluster
def test_explain_and_what_if_of_bad_input_say_what_is_wrong(kube_cluster, admin, namespace, tmp_path):
    kubeconfig = str(kube_cluster.kubeconfig(ADMIN))
    gone = explain("explain", f"{namespace}/nope", kubeconfig=kubeconfig)
    assert (gone.returncode, gone.stdout) == (1, "")
    assert gone.stderr == f"mthreads-webhook: cards explain: pod {namespace}/nope not found\n"
    bad = explain("explain", "nope", kubeconfig=kubeconfig)
    assert bad.returncode == 2 and bad.stderr == "mthreads-webhook: cards explain: 'nope' is not NAMESPACE/POD\n"
    missing = explain("what-if", str(tmp_path / "missing.yaml"), kubeconfig=kubeconfig)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert "cards what-if: " in missing.stderr and "missing.yaml: cannot read: No such file" in missing.stderr
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    out = explain("what-if", str(deployment), kubeconfig=kubeconfig)
    assert out.returncode == 1 and out.stderr.endswith("deploy.yaml: not a Pod (kind: Deployment)\n")
    three = tmp_path / "three.yaml"
    three.write_text("kind: Pod\nspec: {containers: [{name: c, resources: {limits: "
                     "{mthreads.com/vgpu: 1, mthreads.com/sgpu-memory: 3}}}]}\n")
    out = explain("what-if", str(three), kubeconfig=kubeconfig)
    assert out.returncode == 0 and "the webhook would deny it: container \"c\": " \
        "mthreads.com/sgpu-memory=3 is not valid" in " ".join(out.stdout.split())
    classless = tmp_path / "classless.yaml"
    classless.write_text("kind: Pod\nspec: {priorityClassName: no-such-class, containers: "
                         "[{name: c, resources: {limits: {mthreads.com/vgpu: 1, mthreads.com/sgpu-memory: 2}}}]}\n")
    out = explain("what-if", str(classless), kubeconfig=kubeconfig)
    assert out.returncode == 1 and "priorityclass 'no-such-class' not found" in out.stderr


@pytest.mark.cluster
def test_sixty_character_namespaces_and_names_are_never_cut(kube_cluster, admin, fleet, start_allocator):
    """kubectl never cuts a name: neither does the table, nor the pending list."""
    node, = fleet(1, 96)
    start_allocator()
    ns = "e2e-cards-command-shows-" + uuid.uuid4().hex[:8] + "x" * 28
    name = "a-pod-whose-name-is-as-long-as-a-namespace-" + "y" * 17
    assert len(ns) == len(name) == 60
    ensure_namespace(admin, ns)
    try:
        p = pod(slice_(8, 2, name="c"), name=name)
        p["spec"]["nodeSelector"] = fleet.selector
        create(admin, ns, p)
        wait_bound(admin, ns, name)
        waits = pod(slice_(96, 16, name="c"), name=name[:-1] + "z")  # no room left for it
        waits["spec"]["nodeSelector"] = fleet.selector
        create(admin, ns, waits)
        wait_unschedulable(admin, ns, waits["metadata"]["name"])
        kubeconfig = str(kube_cluster.kubeconfig(ADMIN))
        out = cards("--kubeconfig", kubeconfig, "--node", node)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert any(line.split()[-1] == f"{ns}/{name}" for line in lines), out.stdout  # whole, in its cell
        assert any(line.startswith(f"{ns}/{waits['metadata']['name']}:") for line in lines), out.stdout
        assert all(len(line) <= 80 for line in lines if ns not in line), out.stdout
        wide = cards("--kubeconfig", kubeconfig, "--node", node, "-o", "wide").stdout.splitlines()
        assert wide[0].split()[0] == "NODE" and wide[1].split()[0] == node
        assert wide[1].split()[-1] == f"{ns}/{name}"
    finally:
        k.CoreV1Api(admin).delete_namespace(ns)
