"""Part `backoff`: ordinary pods placed while pods that are costly to decide and never fit wait.

A pod can pass admission with a required node affinity of 60,000 host names (about 1.4 MB):
deciding it reads that list for every node, a fraction of a second on a few hundred nodes, on
the allocator's one decision thread. Before issue 32 the allocator decided a pod that did not
fit again on every change of the cluster (at least every 30 s); now it waits for its backoff
first, 1 s after its first try and doubling to 10 s, as kube-scheduler does.

One etcd + kube-apiserver on loopback (tests/harness/kube.py), `--backoff-nodes` fake nodes of
8 cards (bench/e2e.py's). In each run an allocator starts and binds a probe pod; for the rows
"with", ten such pods are created (directly, as the webhook admits them; their host names match
no node) and decided once. Then `--backoff-workers` clients churn ordinary Mthreads slice pods
(bench/workload.py's shapes): each creates a pod, waits until a watch shows it bound, deletes it
(grace 0: room freed, a change the waiting pods are retried on) and starts over. After
`--warmup` seconds (the backoff reaches its 10 s) the pods bound in the next `--duration`
seconds give the rate. "before" is the same allocator with the backoff set to 0 s
(`POD_INITIAL_BACKOFF = POD_MAX_BACKOFF = 0`, the rule before the change: a unit test checks
that it retries on every change); "after" has the defaults. Runs of a round go in a rotated
order; the doc gives medians over rounds. The allocator's own counters give how often the
costly pods were decided in the window and the seconds its decisions took.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from . import workload
from .e2e import LEASE_NS, _drain, _json, delete_pods, ensure_namespace, make_nodes
from .report import Goal, Section, Table

TITLE = "Allocator: ordinary pods while ten costly pods wait (backoff)"
HEAVY_PODS = 10
HOST_NAMES = 60_000
WINDOW, WARMUP, ROUNDS = 20.0, 15.0, 3
WAIT_BOUND = 60.0  # seconds a churning client waits for its pod; then it stops
RATIO_GOAL = 0.70  # after: ordinary pods/s with the ten costly pods / without
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
# The allocator of the "before" rows: the same code with the backoff set to zero (the loop
# reads these two names when it starts; the assert stops a run where it no longer does).
NO_BACKOFF = ("import sys; from webhook.allocator import loop; "
              "assert {'POD_INITIAL_BACKOFF', 'POD_MAX_BACKOFF'} <= set(vars(loop)); "
              "loop.POD_INITIAL_BACKOFF = loop.POD_MAX_BACKOFF = 0.0; "
              "from webhook.cli import main; sys.exit(main(['allocate', *sys.argv[1:]]))")
VARIANTS = ("before", "after")


def add_arguments(g) -> None:
    g.add_argument("--backoff-nodes", type=int, default=200, help="fake nodes (%(default)s)")
    g.add_argument("--backoff-workers", type=int, default=16,
                   help="clients churning ordinary pods (%(default)s)")


def _sizes(args) -> tuple[int, int, float, float]:
    nodes = min(args.backoff_nodes, 50) if args.quick else args.backoff_nodes
    return (nodes, args.rounds or ROUNDS, args.duration or WINDOW,
            WARMUP if args.warmup is None else args.warmup)


def estimate(args) -> float:
    nodes, rounds, window, warmup = _sizes(args)
    return 30 + nodes * 0.05 + rounds * 4 * (window + warmup + 15)


def heavy_pod(i: int, namespace: str) -> dict:
    """A slice pod whose required node affinity names HOST_NAMES hosts, none of them a node."""
    p = workload.pod({"kind": "slice", "gpu_memory": 8, "cores": None, "cpu": "100m",
                      "memory": "256Mi"}, f"heavy-{i:02d}", namespace)
    names = [f"gpu-host-{j:05d}.rack" for j in range(HOST_NAMES)]
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}]}}}
    return p


def _client(cluster, user: str, connections: int):
    c = cluster.api_client(user)
    c.configuration.connection_pool_maxsize = connections
    c.rest_client.__init__(c.configuration)  # the pool size is read when the REST client is made
    return c


class Allocator:
    """`python -m webhook.cli allocate` ("after") or the same with no backoff ("before")."""

    def __init__(self, cluster, workdir: Path, variant: str):
        from tests.harness.allocator import ALLOCATOR_USER
        self.variant, self.kubeconfig = variant, cluster.kubeconfig(ALLOCATOR_USER)
        self.config = workdir / "allocator.yaml"
        self.config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")
        self.log = workdir / f"allocator-{variant}.log"
        self.proc = None

    def start(self) -> None:
        from tests.harness.allocator import AllocatorProcess
        proc = AllocatorProcess(self.kubeconfig, LEASE_NS, self.log, self.config)
        if self.variant == "before":
            assert proc.args[1:4] == ["-m", "webhook.cli", "allocate"]
            proc.args[1:4] = ["-c", NO_BACKOFF]
        self.proc = proc.start()

    def counters(self) -> tuple[float, float, float]:
        """(decisions that found no node matching a node affinity, decisions, their seconds)."""
        url = self.proc.metrics_url + "/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        heavy = count = seconds = 0.0
        for line in text.splitlines():
            key, _, value = line.rpartition(" ")
            if key == f'mthreads_allocator_failures_total{{reason="{AFFINITY}"}}':
                heavy = float(value)
            elif key == "mthreads_allocator_decision_seconds_count":
                count = float(value)
            elif key == "mthreads_allocator_decision_seconds_sum":
                seconds = float(value)
        return heavy, count, seconds

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=20)  # SIGTERM by PID: the lease is given up for the next run
            self.proc = None


class BoundEvents:
    """A watch of one namespace: an Event per pod name, set when the pod is first seen bound."""

    def __init__(self, admin, namespace: str, seconds: float):
        import kubernetes.client as k
        self.core, self.lock = k.CoreV1Api(admin), threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.bound: dict[str, float] = {}
        rv = _json(self.core.list_namespaced_pod(namespace, limit=1, _preload_content=False))[
            "metadata"]["resourceVersion"]
        self.resp = self.core.list_namespaced_pod(
            namespace, watch=True, resource_version=rv, timeout_seconds=int(seconds),
            allow_watch_bookmarks=False, _preload_content=False, _request_timeout=(5, seconds + 30))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def expect(self, name: str) -> threading.Event:
        with self.lock:
            return self.events.setdefault(name, threading.Event())

    def _read(self) -> None:
        try:
            for line in self.resp:
                if not line.strip():
                    continue
                obj = json.loads(line).get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                    self.bound[name] = time.monotonic()
                    self.expect(name).set()
        except Exception:  # closed by close(), or the server went away: the clients time out
            pass

    def close(self) -> None:
        for step in (self.resp.shutdown, self.resp.release_conn):
            try:
                step()
            except Exception:
                pass


class Bench:
    def __init__(self, cluster, admin, workdir: Path, workers: int, window: float, warmup: float):
        self.cluster, self.admin, self.workdir = cluster, admin, workdir
        self.workers, self.window, self.warmup = workers, window, warmup
        self.shapes = [s for s in workload.shapes(4000) if s["kind"] == "slice"]
        self.runs = 0

    def namespace(self, what: str) -> str:
        self.runs += 1
        ns = f"bench-backoff-{what}-{self.runs}"
        ensure_namespace(self.admin, ns)
        return ns

    def probe(self, alloc: Allocator) -> None:
        """Until the allocator bound a pod: it leads, has listed and decides."""
        ns = self.namespace("probe")
        watch = BoundEvents(self.admin, ns, 120)
        try:
            ok = self._create(workload.pod(self.shapes[0], "probe", ns), watch, 90)
        finally:
            watch.close()
        if ok is None:
            raise RuntimeError(f"the allocator ({alloc.variant}) bound no probe pod in 90 s; "
                               f"see {alloc.log}")
        delete_pods(self.admin, ns)

    def _create(self, body: dict, watch: BoundEvents, timeout: float) -> float | None:
        """Create the pod, wait until it is bound; the seconds from its create, None: not bound."""
        import kubernetes.client as k
        name = body["metadata"]["name"]
        bound = watch.expect(name)
        t0 = time.monotonic()
        _drain(k.CoreV1Api(self.admin).create_namespaced_pod(body["metadata"]["namespace"], body,
                                                             _preload_content=False))
        if not bound.wait(timeout):
            return None
        return watch.bound[name] - t0

    def run(self, variant: str, heavy: int) -> dict:
        import kubernetes.client as k
        core = k.CoreV1Api(self.admin)
        alloc = Allocator(self.cluster, self.workdir, variant)
        heavy_ns = self.namespace("heavy")
        ns = self.namespace(f"{variant}-{heavy}")
        try:
            alloc.start()
            self.probe(alloc)
            if heavy:
                for i in range(heavy):
                    _drain(core.create_namespaced_pod(heavy_ns, heavy_pod(i, heavy_ns),
                                                      _preload_content=False))
                deadline = time.monotonic() + 120
                while alloc.counters()[0] < heavy:  # each decided once: they wait now
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {heavy} costly pods were not decided in 120 s")
                    time.sleep(0.2)
            return self._churn(alloc, ns, core)
        finally:
            alloc.stop()
            delete_pods(self.admin, ns)
            delete_pods(self.admin, heavy_ns)

    def _churn(self, alloc: Allocator, ns: str, core) -> dict:
        total = self.warmup + self.window
        watch = BoundEvents(self.admin, ns, total + WAIT_BOUND + 60)
        t0 = time.monotonic()
        start, end = t0 + self.warmup, t0 + total
        waits: list[tuple[float, float]] = []  # (bound at, seconds from create)
        stalled = []
        lock = threading.Lock()
        at_start: list[tuple[float, float, float]] = []

        def client(w: int) -> None:
            i = 0
            while time.monotonic() < end:
                shape = self.shapes[(w * 997 + i) % len(self.shapes)]
                body = workload.pod(shape, f"w{w:02d}-{i:05d}", ns)
                i += 1
                took = self._create(body, watch, WAIT_BOUND)
                if took is None:
                    with lock:
                        stalled.append(body["metadata"]["name"])
                    return
                with lock:
                    waits.append((watch.bound[body["metadata"]["name"]], took))
                _drain(core.delete_namespaced_pod(body["metadata"]["name"], ns,
                                                  grace_period_seconds=0, _preload_content=False))

        def mark() -> None:  # the allocator's counters when the window opens
            time.sleep(max(0.0, start - time.monotonic()))
            at_start.append(alloc.counters())
        threads = [threading.Thread(target=client, args=(w,), daemon=True)
                   for w in range(self.workers)]
        marker = threading.Thread(target=mark, daemon=True)
        for t in threads + [marker]:
            t.start()
        marker.join()
        time.sleep(max(0.0, end - time.monotonic()))
        at_end = alloc.counters()
        for t in threads:
            t.join(WAIT_BOUND + 10)
        watch.close()
        inside = sorted(s for b, s in waits if start <= b < end)
        (h0, n0, s0), (h1, n1, s1) = at_start[0], at_end
        return {"rate": len(inside) / self.window, "bound": len(inside),
                "p50_s": _at(inside, 0.5), "p99_s": _at(inside, 0.99),
                "max_s": inside[-1] if inside else float("nan"),
                "heavy_decisions": h1 - h0, "decisions": n1 - n0, "decision_s": s1 - s0,
                "stalled": len(stalled)}


def _at(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _med(values) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def run(args) -> Section:
    from tests.harness.allocator import grant_allocator_rbac
    from tests.harness.kube import ADMIN, LocalCluster

    nodes, rounds, window, warmup = _sizes(args)
    workers = args.backoff_workers
    workdir = Path(tempfile.mkdtemp(prefix="bench-backoff-"))
    cluster = LocalCluster(workdir / "kube").start()
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        admin = _client(cluster, ADMIN, 2 * workers + 4)
        grant_allocator_rbac(admin)
        ensure_namespace(admin, LEASE_NS)
        t0 = time.monotonic()
        make_nodes(admin, nodes)
        print(f"bench: backoff: {nodes} nodes in {time.monotonic() - t0:.0f} s", flush=True)
        bench = Bench(cluster, admin, workdir, workers, window, warmup)
        cells = [(v, h) for v in VARIANTS for h in (0, HEAVY_PODS)]
        for r in range(rounds):
            for variant, heavy in cells[r % len(cells):] + cells[:r % len(cells)]:
                res = bench.run(variant, heavy)
                results.setdefault((variant, heavy), []).append(res)
                print(f"bench: backoff: round {r + 1}: {variant}, {heavy} costly pods: "
                      f"{res['rate']:.1f} pods/s "
                      + json.dumps({k: round(v, 3) for k, v in res.items()}), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(workdir / "kube", ignore_errors=True)  # etcd's data; the logs stay
    return _section(results, nodes, rounds, window, warmup, workers)


def _section(results, nodes, rounds, window, warmup, workers) -> Section:
    rate = {k: _med([r["rate"] for r in v]) for k, v in results.items()}
    label = {"before": "before: retried on every change",
             "after": "after: backoff 1 s doubling to 10 s"}
    rows = []
    order = sorted(results, key=lambda key: (VARIANTS.index(key[0]), key[1]))
    for variant, heavy in order:
        v = results[(variant, heavy)]
        alone = rate.get((variant, 0), float("nan"))
        # and within each round (the machine's load changes from round to round)
        paired = " / ".join(f"{r['rate'] / a['rate']:.0%}"
                            for r, a in zip(v, results.get((variant, 0), [])) if a["rate"])
        rows.append([label[variant], str(heavy), f"{rate[(variant, heavy)]:.1f}",
                     " / ".join(f"{r['rate']:.1f}" for r in v),
                     f"{rate[(variant, heavy)] / alone:.0%} ({paired})" if heavy else "–",
                     f"{_med([r['p50_s'] for r in v]):.2f} / {_med([r['p99_s'] for r in v]):.2f}"
                     f" / {max(r['max_s'] for r in v):.2f}",
                     f"{_med([r['heavy_decisions'] for r in v]):.0f}",
                     f"{_med([r['decision_s'] for r in v]):.1f}",
                     str(sum(r["stalled"] for r in v))])
    goals = []
    before, after = rate.get(("before", HEAVY_PODS)), rate.get(("after", HEAVY_PODS))
    alone = rate.get(("after", 0))
    if after is not None and alone:
        goals.append(Goal(f"after: ordinary pods/s with {HEAVY_PODS} costly pods waiting ≥ "
                          f"{RATIO_GOAL:.0%} of without", f"{after / alone:.0%}",
                          after >= RATIO_GOAL * alone))
    if after is not None and before:
        goals.append(Goal(f"with {HEAVY_PODS} costly pods waiting: ordinary pods/s after > before",
                          f"{after / before:.1f}×", after > before))
    table = Table(["allocator", "costly pods waiting", "ordinary pods/s (median)", "per round",
                   "of the same allocator without: medians (each round)", "create-to-bound s, p50 / p99 (medians) / "
                   "max (worst round)", f"costly pods' decisions in the {window:.0f} s",
                   f"decision-thread s in the {window:.0f} s", "clients stalled"],
                  rows, f"{workers} clients churning ordinary pods on {nodes} nodes, "
                        f"medians of {rounds} rounds")
    return Section(
        part="backoff", title=TITLE,
        intro=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        conditions=[
            ("cluster", "etcd + kube-apiserver on 127.0.0.1, no kubelet or controller-manager"),
            ("nodes", f"{nodes:,} fake nodes × {workload.CARDS} cards (S4000/S5000 alternating)"),
            ("costly pods", f"{HEAVY_PODS}, each a slice with a required node affinity "
             f"`kubernetes.io/hostname In` {HOST_NAMES:,} names "
             f"({len(json.dumps(heavy_pod(0, 'bench'))) / 1e6:.2f} MB as JSON), matching no node"),
            ("ordinary pods", f"slices of bench/workload.py's shapes, {workers} clients each "
             "create, wait for the bind (a watch), delete, again"),
            ("timing", f"{warmup:.0f} s of churn first, then the pods bound in {window:.0f} s"),
            ("machine", f"{os.cpu_count()} CPUs shared by the API server, etcd, the allocator "
             f"and the bench; Python {platform.python_version()}"),
        ],
        tables=[table], goals=goals)
