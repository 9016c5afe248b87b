"""`mthreads-webhook cards` as a real command against the test API server, on a known fleet."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.builders import slice_
from tests.harness.kube import ADMIN, ALICE, free_ports

from .cluster import create, pod, wait_bound, wait_unschedulable

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
