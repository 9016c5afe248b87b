"""Part `extender`: pods/s through kube-scheduler 1.20 and the extender (filter, prioritize,
bind with one write), against a local API server.

The pods are created first while no node matches their selector (kube-scheduler tries each
once and parks it), then the nodes get the label: kube-scheduler requeues them all at once and
the clock runs until 95% are bound, and "s to all" until the last one is. Before the filter
reserved the cards, a pod whose bind lost a race to its predecessor waited for kube-scheduler
1.20's next cluster event or its 60 s retry, so the last 5% timed that queue; now "s to all"
shows whether any pod still waits (docs/extender.md). The streaming and backlog figures against
kube-scheduler alone and the allocator, on the same pods and nodes, are in the e2e part.
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .report import Section, Table

TITLE = "Extender path: kube-scheduler + extender"
ROUNDS = 3
NODES, CARDS, UNITS = 6, 4, 96
BURST = 0.95  # of the pods: the clock stops here


def add_arguments(g) -> None:
    g.add_argument("--extender-pods", type=int, default=200, help="pods per round (%(default)s)")


def _sizes(args) -> tuple[int, int]:
    if args.quick:
        return min(args.extender_pods, 40), 1
    return args.extender_pods, args.rounds or ROUNDS


def estimate(args) -> float:
    pods, rounds = _sizes(args)
    return 40 + rounds * (pods / 10 + 20)


def _one_round(admin, fleet_tag: str, pods: int) -> dict:
    import kubernetes.client as k

    from tests.builders import sched_pod, slice_
    from tests.harness.kube import ensure_namespace, list_pods, make_fake_node
    from tests.harness.wait import wait_for

    core = k.CoreV1Api(admin)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    ensure_namespace(admin, ns)
    nodes = [f"{fleet_tag}-{i}" for i in range(NODES)]
    for n in nodes:
        make_fake_node(admin, n, CARDS, UNITS, labels={"fleet": fleet_tag})
    selector = {"fleet": fleet_tag, "bench": "on"}

    def create(i: int) -> str:
        p = sched_pod(slice_(8, 1, name="a"), name=f"p{i}")
        p["metadata"].pop("uid")
        p["metadata"]["namespace"] = ns
        p.pop("status")
        p["spec"]["nodeSelector"] = selector
        core.create_namespaced_pod(ns, p, _preload_content=False)
        return p["metadata"]["name"]

    def tried(name: str) -> bool:
        pod = core.read_namespaced_pod(name, ns)
        return any(c.type == "PodScheduled" and c.status == "False"
                   for c in pod.status.conditions or ())

    def n_bound() -> int:
        return sum(1 for p in list_pods(admin, ns) if p["spec"].get("nodeName"))

    try:
        with ThreadPoolExecutor(8) as pool:
            names = list(pool.map(create, range(pods)))
        wait_for(lambda: all(tried(n) for n in names[-5:]), 60, what="pods tried once")
        t0 = time.monotonic()
        for n in nodes:  # now the pods match: kube-scheduler requeues them all
            core.patch_node(n, {"metadata": {"labels": {"bench": "on"}}})
        burst = int(pods * BURST)
        wait_for(lambda: n_bound() >= burst, 120, interval=0.1, what=f"{burst} pods bound")
        elapsed = time.monotonic() - t0
        wait_for(lambda: n_bound() >= pods, 120, interval=0.5, what=f"{pods} pods bound")
        return {"rate": burst / elapsed, "burst_s": elapsed, "all_s": time.monotonic() - t0}
    finally:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        for n in nodes:
            try:
                core.delete_node(n)
            except k.ApiException:
                pass


def run(args) -> Section:
    from tests.harness.allocator import ALLOCATOR_USER, grant_allocator_rbac
    from tests.harness.extender import start_stack
    from tests.harness.kube import ADMIN, LocalCluster
    from tests.harness.wait import wait_for

    pods, rounds = _sizes(args)
    workdir = Path(tempfile.mkdtemp(prefix="bench-extender-"))
    cluster = LocalCluster(workdir / "kube").start()
    stack = ()
    results = []
    try:
        admin = cluster.api_client(ADMIN)
        grant_allocator_rbac(admin)  # the extender binds as the allocator's identity
        stack = start_stack(cluster, workdir, ALLOCATOR_USER, ADMIN)
        extender, scheduler = stack
        wait_for(scheduler.healthy, 90, what="kube-scheduler /healthz")
        for r in range(rounds):
            res = _one_round(admin, f"bx{r}", pods)
            results.append(res)
            print(f"bench: extender: round {r + 1}: {res['rate']:.1f} pods/s "
                  f"({int(pods * BURST)} of {pods} bound in {res['burst_s']:.2f} s, "
                  f"all in {res['all_s']:.1f} s)", flush=True)
    finally:
        for p in reversed(stack):
            p.stop()
        cluster.stop()
        shutil.rmtree(workdir / "kube", ignore_errors=True)  # etcd's data; the logs stay
    rate = statistics.median(r["rate"] for r in results)
    rows = [[f"{rate:.1f}", " / ".join(f"{r['rate']:.1f}" for r in results),
             f"{statistics.median(r['burst_s'] for r in results):.2f}",
             f"{statistics.median(r['all_s'] for r in results):.1f}"]]
    return Section(
        part="extender", title=TITLE, intro=__doc__.split("\n\n", 1)[1].strip(),
        conditions=[
            ("cluster", "etcd + kube-apiserver 1.20.2 and kube-scheduler 1.20.2 (profile "
             "hami-scheduler, the extender node-cache capable) on 127.0.0.1"),
            ("nodes", f"{NODES} fake nodes × {CARDS} S4000 cards"),
            ("pods", f"{pods} per round, one 8-unit slice with 1 core group each"),
            ("machine", f"{os.cpu_count()} CPUs shared by the API server, etcd, kube-scheduler, "
             f"the extender and the bench; Python {platform.python_version()}"),
        ],
        tables=[Table(["pods/s to 95% bound (median)", "per round", "s to 95%", "s to all"],
                      rows, f"{pods} pods, medians of {rounds} rounds")])
