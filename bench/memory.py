"""Part `memory`: the allocator's resident memory with a full cluster in its cache.

In a fresh Python process (nothing else loaded but the scheduling core): a SchedulerCache as the
allocator makes it, fed the way its watches feed it, one event at a time (`--mem-nodes` nodes of
bench/workload.py, zone labels included; then `--mem-pods-per-node` bound pods a node). The pods
are what a busy cluster runs: 20 namespaces, Deployments of 10 replicas (labels `app`, `team`,
`pod-template-hash` shared by the replicas), a third of them with a required anti-affinity on
the hostname against their own replicas, a quarter of them holding a slice of a card (HAMi's
allocation annotation). Resident memory (VmRSS) is read before the cache is made, after the
nodes, and after the pods, each after a garbage collection; the events themselves are gone by
then, as the watch's are.
"""

from __future__ import annotations

import json
import subprocess
import sys

from .report import Section, Table

TITLE = "Allocator memory at full cluster size"
NAMESPACES = 20
REPLICAS = 10


def add_arguments(g) -> None:
    g.add_argument("--mem-nodes", type=int, default=5000, help="nodes (%(default)s)")
    g.add_argument("--mem-pods-per-node", type=int, default=110,
                   help="bound pods a node (%(default)s)")


def estimate(args) -> float:
    return 10 + args.mem_nodes * args.mem_pods_per_node * 60e-6


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _pod(i: int, node: str) -> dict:
    deployment = i // REPLICAS
    ns = f"team-{deployment % NAMESPACES}"
    labels = {"app": f"svc-{deployment}", "team": f"t{deployment % 7}",
              "pod-template-hash": f"{deployment * 7919 % 10**9:09d}"}
    spec: dict = {"nodeName": node, "schedulerName": "hami-scheduler",
                  "containers": [{"name": "main", "image": "registry/app:1",
                                  "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}]}
    if deployment % 3 == 0:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": labels["app"]}},
             "topologyKey": "kubernetes.io/hostname"}]}}
    annotations = {}
    if i % 4 == 0:
        card = f"{node}-mthreads-{i % 8}"
        annotations["hami.io/mthreads-vgpu-devices-allocated"] = f"{card},Mthreads,2048,0:;"
        spec["containers"][0]["resources"]["limits"] = {"mthreads.com/vgpu": "1",
                                                        "mthreads.com/sgpu-memory": "4"}
    return {"metadata": {"name": f"{labels['app']}-{i}", "namespace": ns,
                         "uid": f"00000000-0000-0000-0000-{i:012d}", "labels": labels,
                         "annotations": annotations},
            "spec": spec, "status": {"phase": "Running"}}


def measure(nodes: int, per_node: int) -> dict:
    """In this process: the cache filled as the watches fill it; VmRSS at each step."""
    import gc
    import time

    from webhook.model.config import MthreadsConfig
    from webhook.scheduling.cache import STORAGE_KINDS, SchedulerCache

    from . import workload
    gc.collect()
    base = _rss_mib()
    cache = SchedulerCache(MthreadsConfig(memory_per_card=workload.MEMORY_PER_CARD),
                           kinds=("node", "pod") + STORAGE_KINDS)
    t0 = time.perf_counter()
    cache.apply("node", "RESET", [])
    for i in range(nodes):
        n = workload.node(i)
        n["metadata"]["labels"][workload.ZONE] = workload.zone(i)
        cache.apply("node", "ADDED", n)
    gc.collect()
    after_nodes = _rss_mib()
    cache.apply("pod", "RESET", [])
    for i in range(nodes * per_node):
        cache.apply("pod", "ADDED", _pod(i, workload.node_name(i % nodes)))
    seconds = time.perf_counter() - t0
    gc.collect()
    after_pods = _rss_mib()
    return {"base": base, "nodes": after_nodes - base, "pods": after_pods - after_nodes,
            "total": after_pods, "seconds": seconds,
            "held": cache.read(lambda s: len(s.shares))}


def run(args) -> Section:
    nodes, per_node = args.mem_nodes, args.mem_pods_per_node
    out = subprocess.run([sys.executable, "-c",
                          "import json, sys; from bench.memory import measure; "
                          f"print(json.dumps(measure({nodes}, {per_node})))"],
                         check=True, capture_output=True, text=True).stdout
    m = json.loads(out.strip().splitlines()[-1])
    pods = nodes * per_node
    print(f"bench: memory: {nodes} nodes, {pods} pods: {m['total']:.0f} MiB resident", flush=True)
    rows = [[f"{nodes:,}", f"{pods:,}", f"{m['base']:.0f}", f"{m['nodes']:.0f}",
             f"{1024 * m['nodes'] / nodes:.1f}", f"{m['pods']:.0f}",
             f"{2**20 * m['pods'] / pods:,.0f}", f"{m['total']:.0f}", f"{m['seconds']:.0f}"]]
    return Section(
        part="memory", title=TITLE,
        intro=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        conditions=[("python", sys.version.split()[0])],
        tables=[Table(["nodes", "pods", "MiB before", "MiB for the nodes", "KiB / node",
                       "MiB for the pods", "bytes / pod", "MiB resident in all", "s to feed"],
                      rows, "Resident memory (VmRSS) of a process holding the allocator's cache")])
