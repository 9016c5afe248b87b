"""Part `e2e`: the allocator against kube-scheduler 1.20 on a real API server with fake nodes.

One etcd + kube-apiserver 1.20 on loopback (tests/harness/kube.py), `--e2e-nodes` fake nodes of
8 cards (S4000 and S5000 alternating; Ready, the NodeTaint plugin's not-ready taint taken off as
the node lifecycle controller would). Each run creates `--e2e-pods` pods in a fresh namespace
from 8 client threads at full speed (raw JSON POSTs, `_preload_content=False`) and a watch in
the bench records when each pod is first seen bound:

- the allocator (`python -m webhook.cli allocate`, its own RBAC user) places pods in the form the
  webhook writes (`hami-scheduler`, Mthreads slices and whole cards; bench/workload.py);
- kube-scheduler 1.20 (KubeSchedulerConfiguration v1beta1, qps 1000 / burst 2000, no leader
  election, profile `default-scheduler`, admin credentials) places the same pods with the same
  requests, the cards' memory and cores as plain extended resources that it checks itself
  against the nodes' totals (it does not know the cards);
- kube-scheduler + extender: the same kube-scheduler with profile `hami-scheduler` and this
  project's extender (`python -m webhook.cli extender`; filter, which reserves the cards,
  prioritize, bind) places the pods in the allocator's form (tests/harness/extender.py); its
  CPU is both processes'. Streaming runs also give create-to-bound seconds per pod (from the
  answer to its POST to the watch event that shows it bound): p50, p99, max;
- only when named (`--e2e-only ...,floor,floor-no-watch`), the same kube-scheduler calling
  bench/floor_extender.py, an extender that decides nothing on the extender's own HTTP server,
  API client and watches (with and without them): the floor of the stack, the nearest the
  extender could come to kube-scheduler alone.

Two ways: **streaming** (the scheduler runs and is warm — a probe pod was bound — before the
pods are created; pods/s = pods / (last bound − first create), which cannot pass the rate at
which the client creates them, so the seconds from the last create to the last bind are given
too) and **backlog** (all pods are Pending first, then the scheduler starts; pods/s = pods /
(last bound − first bound), and the time from the process start is given too). A third
allocator row binds with `--bind-threads 1`: one write at a time, as it did before its
binding pool. CPU seconds are read from /proc for the scheduler (for the raw row: the bench's
client), the API server and etcd, from the first bind to the last. **Raw ceiling**: pods that already exist (scheduler
name nobody serves) bound by 8 Python threads with `pods/binding` POSTs that carry the same
annotations as the allocator's. Between runs the scheduler is stopped (SIGTERM by PID) and the
pods are deleted with gracePeriodSeconds=0 (the pods also set terminationGracePeriodSeconds 0:
with no kubelet, a graceful delete of a bound pod would leave it Terminating for good); the
bench waits until the namespace is empty. The runs of a round go in a rotated order; the doc
quotes medians over rounds.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import workload
from .report import Goal, Section, Table

TITLE = "End to end: allocator against kube-scheduler"
ROOT = Path(__file__).resolve().parent.parent
LEASE_NS = "mthreads-system"
THREADS = 8
CEILING_GOAL = 0.80
# (issue 37) kube-scheduler + extender against kube-scheduler alone: backlog (from the first
# bind, and from the launch), streaming; and the streaming p99 from create to bound, seconds
EXTENDER_GOAL = {"backlog": 0.85, "streaming": 0.90}
EXTENDER_P99_GOAL = 1.0
MAX_WAIT_GOAL = 5.0  # seconds from create to bound, for a pod that had room
KS_NAME = "default-scheduler"
NOBODY = "bench-nobody"
RUN_TIMEOUT = 300.0
CONSTRAINED = "backlog, 1/3 sidecar + anti-affinity + spread"  # the run of bench/workload.py's constrain()
CONSTRAINED_GOAL = 3.0  # (issue 47) the allocator against kube-scheduler, pods of today's shape
BACKLOG_GOAL = 2.0  # (issue 34) the allocator against kube-scheduler, in both backlog rows
ROUNDS = 5  # default of --rounds: the runs on 2 shared cores vary by ±30%


def add_arguments(g) -> None:
    g.add_argument("--e2e-nodes", type=int, default=500, help="fake nodes (%(default)s)")
    g.add_argument("--e2e-pods", type=int, default=2000, help="pods per run (%(default)s)")
    g.add_argument("--e2e-only", default="",
                   help="comma-separated rows to run, of: allocator, kube-scheduler, extender, "
                        "raw, sequential (default: all of these), and, only when named, "
                        "extender-all (the extender with kube-scheduler filtering every node), "
                        "floor and floor-no-watch (bench/floor_extender.py, an extender that "
                        "decides nothing, with and without the extender's watches)")
    g.add_argument("--e2e-profile", type=float, default=4.0,
                   help="seconds of py-spy on the allocator in an extra backlog run "
                        "(0: none; needs py-spy) (%(default)s)")


def _sizes(args) -> tuple[int, int, int]:
    if args.quick:
        return min(args.e2e_nodes, 50), min(args.e2e_pods, 200), 1
    return args.e2e_nodes, args.e2e_pods, args.rounds or ROUNDS


def estimate(args) -> float:
    nodes, pods, rounds = _sizes(args)
    return 30 + nodes * 0.03 + rounds * 6 * (pods / 100 + 10)


# --- the cluster ---------------------------------------------------------------------------

def _client(cluster, user):
    c = cluster.api_client(user)
    c.configuration.connection_pool_maxsize = 2 * THREADS
    c.rest_client.__init__(c.configuration)  # the pool size is read when the REST client is made
    return c


def _parallel(fn, items, threads: int = THREADS) -> list:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def make_nodes(admin, count: int) -> list[str]:
    import kubernetes.client as k

    from tests.harness.kube import make_fake_node
    core = k.CoreV1Api(admin)

    def one(i: int) -> str:
        name = workload.node_name(i)
        make_fake_node(admin, name, workload.CARDS, workload.MODELS[i % 2], cpu="64", memory="512Gi",
                       labels={workload.ZONE: workload.zone(i)})
        _drain(core.patch_node(name, {"spec": {"taints": None}}, _preload_content=False))
        return name
    return _parallel(one, range(count))


def ensure_namespace(admin, name: str) -> None:
    import kubernetes.client as k
    try:
        key, value = workload.NAMESPACE_LABEL
        _drain(k.CoreV1Api(admin).create_namespace(
            {"metadata": {"name": name, "labels": {key: value}}}, _preload_content=False))
    except k.ApiException as e:
        if e.status != 409:
            raise


def _drain(resp) -> None:
    """Read the reply before the connection goes back to the pool (else the next call reads it)."""
    try:
        resp.data
    finally:
        resp.release_conn()


def _json(resp) -> dict:
    try:
        return json.loads(resp.data)
    finally:
        resp.release_conn()


def create_pods(admin, namespace: str, bodies: list[dict],
                created: dict[str, float] | None = None) -> tuple[float, float, int]:
    """POST every pod from THREADS threads; (first start, last end, failures). `created`: filled
    with each pod's name -> when its POST was answered (monotonic)."""
    import kubernetes.client as k
    core = k.CoreV1Api(admin)
    failures = 0
    lock = threading.Lock()

    def one(body):
        nonlocal failures
        try:
            _drain(core.create_namespaced_pod(namespace, body, _preload_content=False))
            if created is not None:
                created[body["metadata"]["name"]] = time.monotonic()
        except k.ApiException:
            with lock:
                failures += 1
    t0 = time.monotonic()
    _parallel(one, bodies)
    return t0, time.monotonic(), failures


def delete_pods(admin, namespace: str, timeout: float = 120) -> float:
    """Delete all pods of the namespace at once (grace 0) and wait until none is left."""
    import kubernetes.client as k
    core = k.CoreV1Api(admin)
    t0 = time.monotonic()
    _drain(core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0,
                                          _preload_content=False))
    while time.monotonic() - t0 < timeout:
        left = _json(core.list_namespaced_pod(namespace, limit=1, _preload_content=False))
        if not left["items"]:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise RuntimeError(f"pods of {namespace} still there {timeout:.0f} s after the delete "
                       f"(Terminating? {left['items'][0]['metadata'].get('deletionTimestamp')})")


class BoundWatch:
    """Watch a namespace's pods; remember when each was first seen with spec.nodeName."""

    def __init__(self, admin, namespace: str, expected: int):
        import kubernetes.client as k
        self.core, self.namespace, self.expected = k.CoreV1Api(admin), namespace, expected
        self.bound: dict[str, float] = {}
        self.nodes: Counter = Counter()
        self.done = threading.Event()
        self.error: BaseException | None = None
        rv = _json(self.core.list_namespaced_pod(namespace, limit=1, _preload_content=False))[
            "metadata"]["resourceVersion"]
        self.resp = self.core.list_namespaced_pod(namespace, watch=True, resource_version=rv,
                                                  timeout_seconds=int(RUN_TIMEOUT) + 60,
                                                  allow_watch_bookmarks=False,
                                                  _preload_content=False,
                                                  _request_timeout=(5, RUN_TIMEOUT + 90))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.resp:
                if not line.strip():
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                node = (obj.get("spec") or {}).get("nodeName")
                name = (obj.get("metadata") or {}).get("name")
                if node and name not in self.bound:
                    self.bound[name] = time.monotonic()
                    self.nodes[node] += 1
                    if len(self.bound) >= self.expected:
                        self.done.set()
                        return
        except BaseException as e:  # closed under us, or the server went away
            if not self.done.is_set():
                self.error = e
        finally:
            self.done.set()

    def wait(self, timeout: float) -> bool:
        self.done.wait(timeout)
        return len(self.bound) >= self.expected

    def close(self) -> None:
        self.done.set()
        try:
            self.resp.shutdown()
        except Exception:
            pass
        try:
            self.resp.release_conn()
        except Exception:
            pass


# --- the schedulers --------------------------------------------------------------------------

class Scheduler:
    name: str
    proc: subprocess.Popen | None = None

    def pids(self) -> dict[str, int]:
        """The processes whose CPU counts as the scheduler's."""
        return {"scheduler": self.proc.pid}

    def python_pid(self) -> int:
        """The Python process py-spy samples (`--e2e-profile`)."""
        return self.proc.pid

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None


class AllocatorScheduler(Scheduler):
    scheduler_name = workload.SCHEDULER
    form = workload.MTHREADS

    def __init__(self, cluster, workdir: Path, bind_threads: int | None = None):
        """`bind_threads` None: the allocator's default; 1 writes one binding at a time."""
        from tests.harness.allocator import ALLOCATOR_USER
        self.label = "allocator" if bind_threads is None else f"allocator, {bind_threads} bind thread"
        self.extra = () if bind_threads is None else ("--bind-threads", str(bind_threads))
        self.kubeconfig = cluster.kubeconfig(ALLOCATOR_USER)
        self.config = workdir / "allocator.yaml"
        self.config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")
        self.log = workdir / ("allocator.log" if bind_threads is None
                              else f"allocator-{bind_threads}-bind-threads.log")

    def start(self) -> None:
        from tests.harness.allocator import AllocatorProcess
        ap = AllocatorProcess(self.kubeconfig, LEASE_NS, self.log, self.config, self.extra).start()
        self.proc = ap.proc


class KubeScheduler(Scheduler):
    label = "kube-scheduler"
    scheduler_name = KS_NAME
    form = workload.EXTENDED

    def __init__(self, cluster, workdir: Path):
        from tests.harness.kube import ADMIN
        self.binary = str(cluster.kube_scheduler_path)
        self.config = workdir / "kube-scheduler.yaml"
        self.config.write_text(
            "apiVersion: kubescheduler.config.k8s.io/v1beta1\n"
            "kind: KubeSchedulerConfiguration\n"
            "clientConnection:\n"
            f"  kubeconfig: {cluster.kubeconfig(ADMIN)}\n"
            "  qps: 1000\n"
            "  burst: 2000\n"
            "leaderElection:\n"
            "  leaderElect: false\n"
            "profiles:\n"
            f"- schedulerName: {KS_NAME}\n")
        self.log = workdir / "kube-scheduler.log"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config={self.config}", "--bind-address=127.0.0.1", "--port=0",
                 "--secure-port=0", "--v=1"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], stdout=subprocess.PIPE, text=True,
                             timeout=20).stdout.strip()
        return out.split()[-1] if out else "?"


class ExtenderStack(Scheduler):
    """kube-scheduler 1.20 (profile hami-scheduler) calling the extender, as tests/extender runs
    them (tests/harness/extender.py), with kube-scheduler's log at --v=1 like the row above."""

    label = "kube-scheduler + extender"
    scheduler_name = workload.SCHEDULER
    form = workload.MTHREADS

    def __init__(self, cluster, workdir: Path, node_sample: int = 0):
        """`node_sample`: kube-scheduler's percentageOfNodesToScore (0, its adaptive sample, as
        the chart's default; another value makes a row of its own)."""
        self.cluster, self.node_sample = cluster, node_sample
        self.workdir = workdir / ("extender" if not node_sample else f"extender-{node_sample}")
        self.workdir.mkdir(exist_ok=True)
        if node_sample:
            self.label = f"{ExtenderStack.label}, {node_sample}% of the nodes"
        self.log = self.workdir / "kube-scheduler.log"
        self.stack = None
        self.program = ("-m", "webhook.cli", "extender")

    def start(self) -> None:
        from tests.harness.allocator import ALLOCATOR_USER
        from tests.harness.extender import start_stack
        from tests.harness.kube import ADMIN
        self.stack = start_stack(self.cluster, self.workdir, ALLOCATOR_USER, ADMIN, verbosity=1,
                                 node_sample=self.node_sample, program=self.program)
        self.proc = self.stack[1].proc

    def pids(self) -> dict[str, int]:
        return {"scheduler": self.proc.pid, "extender": self.stack[0].proc.pid}

    def python_pid(self) -> int:
        return self.stack[0].proc.pid

    def stop(self) -> None:
        if self.stack is not None:
            for p in reversed(self.stack):
                p.stop()
        self.stack = self.proc = None


class FloorStack(ExtenderStack):
    """The same kube-scheduler calling bench/floor_extender.py: the extender's HTTP server, API
    client and (`watch`) watches with no decision between them, the floor of the stack."""

    def __init__(self, cluster, workdir: Path, watch: bool = True):
        super().__init__(cluster, workdir)
        self.label = "kube-scheduler + floor extender" + ("" if watch else ", no watches")
        self.workdir = workdir / ("floor" if watch else "floor-no-watch")
        self.workdir.mkdir(exist_ok=True)
        self.log = self.workdir / "kube-scheduler.log"
        self.program = ("-m", "bench.floor_extender") + (() if watch else ("--no-watch",))


# --- runs --------------------------------------------------------------------------------------

class Bench:
    def __init__(self, cluster, admin, workdir: Path, pods: int):
        self.cluster, self.admin, self.workdir, self.pods = cluster, admin, workdir, pods
        self.shapes = workload.shapes(pods)
        self.runs = 0

    def namespace(self, what: str) -> str:
        self.runs += 1
        ns = f"bench-{re.sub(r'[^a-z0-9]+', '-', what)}-{self.runs}"
        ensure_namespace(self.admin, ns)
        return ns

    def bodies(self, ns: str, sched: Scheduler | None, constrained: bool = False) -> list[dict]:
        if sched is None:
            return [workload.pod(s, f"p{i:05d}", ns, scheduler=NOBODY)
                    for i, s in enumerate(self.shapes)]
        made = [workload.pod(s, f"p{i:05d}", ns, form=sched.form,
                             scheduler=sched.scheduler_name) for i, s in enumerate(self.shapes)]
        return [workload.constrain(b, i) for i, b in enumerate(made)] if constrained else made

    def warm(self, sched: Scheduler) -> float:
        """Start the scheduler and wait until it bound a probe pod: it has listed and is deciding."""
        ns = self.namespace("probe")
        t0 = time.monotonic()
        sched.start()
        watch = BoundWatch(self.admin, ns, 1)
        create_pods(self.admin, ns, [workload.pod(self.shapes[0], "probe", ns, form=sched.form,
                                                  scheduler=sched.scheduler_name)])
        ok = watch.wait(60)
        watch.close()
        if not ok:
            raise RuntimeError(f"{sched.label} bound no probe pod in 60 s; see {sched.log.name}")
        delete_pods(self.admin, ns)
        return time.monotonic() - t0

    def streaming(self, sched: Scheduler) -> dict:
        self.warm(sched)
        ns = self.namespace(f"{sched.label}-stream")
        bodies = self.bodies(ns, sched)
        watch = BoundWatch(self.admin, ns, len(bodies))
        created: dict[str, float] = {}
        try:
            t0, t1, failures = create_pods(self.admin, ns, bodies, created)
            ok = watch.wait(RUN_TIMEOUT)
        finally:
            watch.close()
            sched.stop()
        waits = sorted(max(watch.bound[n] - c, 0.0) for n, c in created.items() if n in watch.bound)
        return self._finish(ns, watch, ok, failures, {
            **_percentiles(waits),
            "create_s": t1 - t0, "create_rate": len(bodies) / (t1 - t0),
            "rate": len(watch.bound) / (max(watch.bound.values()) - t0) if watch.bound else 0.0,
            "total_s": (max(watch.bound.values()) - t0) if watch.bound else float("nan"),
            "lag_s": (max(watch.bound.values()) - t1) if watch.bound else float("nan")})

    def backlog(self, sched: Scheduler, profile: float = 0.0, constrained: bool = False) -> dict:
        ns = self.namespace(f"{sched.label}-backlog{'-constrained' if constrained else ''}")
        bodies = self.bodies(ns, sched, constrained)
        t0, t1, failures = create_pods(self.admin, ns, bodies)
        watch = BoundWatch(self.admin, ns, len(bodies))
        spy = cpu = None
        try:
            started = time.monotonic()
            sched.start()
            # once it decides: past the imports and the first list
            deadline = time.monotonic() + 60
            while not watch.bound and time.monotonic() < deadline and not watch.done.is_set():
                time.sleep(0.02)
            cpu = CpuMeter({**sched.pids(), **self.cluster_pids()})
            if profile:
                spy = PySpy(sched.python_pid(), profile, self.workdir / f"py-spy-{self.runs}.txt")
            ok = watch.wait(RUN_TIMEOUT)
            cpu.stop()
        finally:
            watch.close()
            if spy:
                spy.wait()
            sched.stop()
        times = sorted(watch.bound.values())
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        result = self._finish(ns, watch, ok, failures, {
            "create_s": t1 - t0, "create_rate": len(bodies) / (t1 - t0), "rate": rate,
            "total_s": (times[-1] - started) if times else float("nan"),
            "first_s": (times[0] - started) if times else float("nan"),
            **cpu.per_thousand(len(times))})
        if spy:
            result["profile"] = spy.result()
        return result

    def ceiling(self) -> dict:
        """pods/binding POSTs from THREADS threads for pods that exist, with the allocator's
        annotations (a slice on card 0 of a node, round robin over the nodes)."""
        import kubernetes.client as k
        core = k.CoreV1Api(self.admin)
        ns = self.namespace("raw-bind")
        bodies = self.bodies(ns, None)
        create_pods(self.admin, ns, bodies)
        nodes = [workload.node_name(i) for i in range(self.nodes)]
        fails = 0
        lock = threading.Lock()

        def one(i: int):
            nonlocal fails
            node = nodes[i % len(nodes)]
            now = time.time_ns()
            ann = {"hami.io/mthreads-vgpu-devices-allocated": f"{node}-mthreads-0,Mthreads,2048,0:;",
                   "mthreads.com/gpu-index": "0", "mthreads.com/predicate-node": node,
                   "hami.io/vgpu-node": node, "mthreads.com/predicate-time": str(now),
                   "hami.io/vgpu-time": str(now // 10**9), "hami.io/bind-time": str(now // 10**9),
                   "hami.io/bind-phase": "allocating"}
            name = bodies[i]["metadata"]["name"]
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns, "annotations": ann},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            try:
                _drain(core.create_namespaced_pod_binding(name, ns, body,
                                                   _preload_content=False))
            except k.ApiException:
                with lock:
                    fails += 1
        cpu = CpuMeter({"scheduler": os.getpid(), **self.cluster_pids()})  # the client: this process
        t0 = time.monotonic()
        _parallel(one, range(len(bodies)))
        elapsed = time.monotonic() - t0
        cpu.stop()
        delete_pods(self.admin, ns)
        return {"rate": (len(bodies) - fails) / elapsed, "failures": fails, "total_s": elapsed,
                **cpu.per_thousand(len(bodies) - fails)}

    def cluster_pids(self) -> dict[str, int]:
        return {"apiserver": self.cluster._apiserver.pid, "etcd": self.cluster._etcd.pid}

    def _finish(self, ns: str, watch: BoundWatch, ok: bool, failures: int, out: dict) -> dict:
        out.update(bound=len(watch.bound), failures=failures, complete=ok,
                   nodes_used=len(watch.nodes), delete_s=delete_pods(self.admin, ns))
        if watch.error is not None and not ok:
            out["error"] = f"{type(watch.error).__name__}: {watch.error}"
        return out


class CpuMeter:
    """CPU seconds (user + system, from /proc) that some processes spent between start and stop."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.start = {k: self._read(p) for k, p in pids.items()}
        self.spent: dict[str, float] = {}

    def _read(self, pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / self.TICK  # utime, stime

    def stop(self) -> None:
        self.spent = {k: self._read(p) - self.start[k] for k, p in self.pids.items()}

    def per_thousand(self, pods: int) -> dict[str, float]:
        """CPU seconds per 1,000 pods bound, by process, as cpu_<name> keys."""
        return {f"cpu_{k}": v * 1000 / pods if pods else float("nan") for k, v in self.spent.items()}


class PySpy:
    """py-spy record on a PID for some seconds, raw (collapsed) stacks, in the background."""

    def __init__(self, pid: int, seconds: float, out: Path):
        self.out = out
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = None
        if Path(exe).exists():
            self.proc = subprocess.Popen(
                [exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100", "-f", "raw",
                 "-o", str(out), "--nonblocking"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> None:
        if self.proc:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=10)

    def result(self) -> dict[str, list[list[str]]]:
        """Where the process's threads spent the samples in which they were running: by
        thread role, and the top frames over all of them by inclusive share."""
        if not self.out.exists():
            return {}
        total, inclusive, own, roles = 0, Counter(), Counter(), Counter()
        for line in self.out.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            total += n
            roles[next((role for marker, role in THREAD_ROLES if marker in stack), "other")] += n
            frames = stack.split(";")
            seen = set()
            for f in frames:
                key = _frame(f)
                if key not in seen:
                    inclusive[key] += n
                    seen.add(key)
            own[_frame(frames[-1])] += n
        if not total:
            return {}
        rows = []
        for key, n in inclusive.most_common(60):
            if key.split(" (", 1)[1].startswith(("allocator/", "extender/", "scheduling/", "kube/",
                                                  "webhook/", "client/", "urllib3/", "http/",
                                                  "ssl.py", "json/")):
                rows.append([f"`{key}`", f"{100 * n / total:.0f}%", f"{100 * own[key] / total:.0f}%"])
            if len(rows) >= 16:
                break
        return {"roles": [[role, f"{100 * n / total:.0f}%"] for role, n in roles.most_common()],
                "frames": rows}


# a sample's thread, by a frame its stack holds (py-spy leaves idle threads out)
THREAD_ROLES = (("run (webhook/allocator/loop.py", "decision loop"),
                ("webhook/extender/http_server.py", "extender: answering kube-scheduler"),
                ("_write (webhook/kube/binder.py", "binding writes"),
                ("kube/informer.py", "watches"),
                ("kube/leader.py", "Lease"))


def _frame(f: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py)' without the machine's path prefix."""
    name, _, where = f.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    for marker in ("webhook/", "site-packages/", "lib/python"):
        if marker in path:
            path = path[path.index(marker):]
            break
    return f"{name} ({path.rsplit('/', 2)[-2] + '/' if '/' in path else ''}{path.rsplit('/', 1)[-1]})"


# --- the part -----------------------------------------------------------------------------------

def _percentiles(waits: list[float]) -> dict[str, float]:
    """p50 / p99 / max of sorted create-to-bound seconds."""
    if not waits:
        return {"p50_s": float("nan"), "p99_s": float("nan"), "max_s": float("nan")}
    at = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]  # noqa: E731
    return {"p50_s": at(0.50), "p99_s": at(0.99), "max_s": waits[-1]}


def _med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def run(args) -> Section:
    from tests.harness.allocator import grant_allocator_rbac
    from tests.harness.kube import ADMIN, LocalCluster

    nodes, pods, rounds = _sizes(args)
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    cluster = LocalCluster(workdir / "kube").start()
    scheds: list[Scheduler] = []
    try:
        admin = _client(cluster, ADMIN)
        grant_allocator_rbac(admin)
        ensure_namespace(admin, LEASE_NS)
        t0 = time.monotonic()
        make_nodes(admin, nodes)
        print(f"bench: e2e: {nodes} nodes in {time.monotonic() - t0:.0f} s", flush=True)
        alloc, ks = AllocatorScheduler(cluster, workdir), KubeScheduler(cluster, workdir)
        sequential = AllocatorScheduler(cluster, workdir, bind_threads=1)  # how it bound before
        stack = ExtenderStack(cluster, workdir)
        every = ExtenderStack(cluster, workdir, node_sample=100)  # the chart's earlier default
        floor, bare = FloorStack(cluster, workdir), FloorStack(cluster, workdir, watch=False)
        scheds = [alloc, ks, sequential, stack, every, floor, bare]
        ks_version = ks.version()
        bench = Bench(cluster, admin, workdir, pods)
        bench.nodes = nodes
        results: dict[tuple[str, str], list[dict]] = {}
        profiles: dict[str, dict] = {}
        cells = [("allocator", "streaming"), ("kube-scheduler", "streaming"),
                 (stack.label, "streaming"), ("allocator", "backlog"),
                 ("kube-scheduler", "backlog"), (stack.label, "backlog"), ("raw", "ceiling"),
                 (sequential.label, "backlog"), ("allocator", CONSTRAINED),
                 ("kube-scheduler", CONSTRAINED)]
        only = {w.strip() for w in args.e2e_only.split(",") if w.strip()}
        named = {"extender-all": every, "floor": floor, "floor-no-watch": bare}
        for word, extra in named.items():  # only when asked for: each adds two runs a round
            if word in only:
                cells += [(extra.label, "streaming"), (extra.label, "backlog")]
        if only:
            short = {"extender": stack.label, "sequential": sequential.label,
                     **{word: extra.label for word, extra in named.items()}}
            keep = {short.get(w, w) for w in only}
            cells = [c for c in cells if c[0] in keep]
        by_label = {s.label: s for s in scheds}
        for r in range(rounds):
            order = cells[r % len(cells):] + cells[:r % len(cells)]
            for who, how in order:
                if who == "raw":
                    res = bench.ceiling()
                elif how == "streaming":
                    res = bench.streaming(by_label[who])
                else:
                    res = bench.backlog(by_label[who], 0.0, constrained=how == CONSTRAINED)
                results.setdefault((who, how), []).append(res)
                _print(f"round {r + 1}: {who} {how}", res)
        # Sampling takes CPU from the run it watches (2 cores here): a run of its own for each
        # Python scheduler, after the rounds and out of their medians.
        for who, short in ((alloc, "allocator"), (stack, "extender")):
            if args.e2e_profile > 0 and (not only or short in only):
                res = bench.backlog(who, args.e2e_profile)
                profiles[who.label] = res.get("profile") or {}
                _print(f"profiled {who.label} backlog (not in the medians)", res)
    finally:
        for s in scheds:
            s.stop()
        cluster.stop()
        shutil.rmtree(workdir / "kube", ignore_errors=True)  # etcd's data; the logs stay
    return _section(results, nodes, pods, rounds, ks_version, workdir, profiles)


def _print(what: str, res: dict) -> None:
    print(f"bench: e2e: {what}: {res['rate']:.0f} pods/s "
          + json.dumps({k: (round(v, 2) if isinstance(v, float) else v)
                        for k, v in res.items() if k != "profile"}), flush=True)


def _cpu(runs: list[dict]) -> str:
    """Scheduler (kube-scheduler + extender for that row) / API server / etcd."""
    if not any("cpu_scheduler" in r for r in runs):
        return "–"
    spent = [{**r, "cpu_scheduler": r.get("cpu_scheduler", float("nan")) + r.get("cpu_extender", 0.0)}
             for r in runs]
    return " / ".join(f"{_med([r.get(f'cpu_{k}', float('nan')) for r in spent]):.2f}"
                      for k in ("scheduler", "apiserver", "etcd"))


def _waits(runs: list[dict]) -> str:
    if not all("max_s" in r for r in runs):
        return "–"
    return " / ".join(f"{_med([r[k] for r in runs]):.2f}" for k in ("p50_s", "p99_s")) + \
        f" / {max(r['max_s'] for r in runs):.2f}"


def _section(results, nodes, pods, rounds, ks_version, workdir, profiles) -> Section:
    rate = {k: _med([r["rate"] for r in v]) for k, v in results.items()}
    rows = []
    for (who, how), v in results.items():
        if who == "raw":
            continue
        rows.append([who, how, f"{rate[(who, how)]:.0f}",
                     " / ".join(f"{r['rate']:.0f}" for r in v),
                     f"{_med([r['total_s'] for r in v]):.1f}",
                     f"{_med([r['create_rate'] for r in v]):.0f}",
                     f"{_med([r.get('first_s', float('nan')) for r in v]):.1f}" if how != "streaming"
                     else f"{_med([r['lag_s'] for r in v]):.2f}",
                     f"{min(r['bound'] for r in v):,}/{pods:,}",
                     f"{_med([r['nodes_used'] for r in v]):.0f}", _waits(v), _cpu(v)])
    ceiling = rate.get(("raw", "ceiling"), float("nan"))
    raw = results.get(("raw", "ceiling"), [])
    rows.append(["raw bindings", f"{THREADS} threads", f"{ceiling:.0f}",
                 " / ".join(f"{r['rate']:.0f}" for r in raw),
                 f"{_med([r['total_s'] for r in raw]):.1f}", "–", "–",
                 f"{pods - max((r['failures'] for r in raw), default=0):,}/{pods:,}", "–", "–",
                 _cpu(raw)])
    goals = []
    for how, times in (("streaming", 1.0), ("backlog", BACKLOG_GOAL), (CONSTRAINED, CONSTRAINED_GOAL)):
        a, k = rate.get(("allocator", how)), rate.get(("kube-scheduler", how))
        if a is not None and k is not None:
            goals.append(Goal(f"{how}: allocator pods/s ≥ {times:g}× kube-scheduler's",
                              f"{a / k:.2f}×", a >= times * k))
    for how in ("streaming", "backlog"):
        a = rate.get(("allocator", how))
        if a is not None and ceiling == ceiling:
            goals.append(Goal(f"{how}: allocator pods/s ≥ {CEILING_GOAL:.0%} of the raw binding "
                              f"ceiling", f"{a / ceiling:.0%}", a >= CEILING_GOAL * ceiling))
    for how, least in EXTENDER_GOAL.items():
        b, k = rate.get((ExtenderStack.label, how)), rate.get(("kube-scheduler", how))
        if b is not None and k is not None:
            since = " from the first bind" if how == "backlog" else ""
            goals.append(Goal(f"{how}: kube-scheduler + extender pods/s{since} ≥ {least:.0%} of "
                              "kube-scheduler's alone", f"{b / k:.0%}", b >= least * k))
    launch = {who: _med([pods / r["total_s"] for r in results.get((who, "backlog"), [])])
              for who in (ExtenderStack.label, "kube-scheduler")}
    if all(v == v for v in launch.values()):  # both ran: pods over the seconds from the launch
        b, k = launch[ExtenderStack.label], launch["kube-scheduler"]
        least = EXTENDER_GOAL["backlog"]
        goals.append(Goal(f"backlog: kube-scheduler + extender pods/s from the launch ≥ "
                          f"{least:.0%} of kube-scheduler's alone", f"{b / k:.0%}", b >= least * k))
    stream = results.get((ExtenderStack.label, "streaming"))
    if stream and all("p99_s" in r for r in stream):
        p99 = _med([r["p99_s"] for r in stream])
        goals.append(Goal(f"streaming: kube-scheduler + extender create-to-bound p99 (median of "
                          f"the rounds) ≤ {EXTENDER_P99_GOAL:g} s", f"{p99:.2f} s",
                          p99 <= EXTENDER_P99_GOAL))
    if stream and all("max_s" in r for r in stream):
        worst = max(r["max_s"] for r in stream)
        goals.append(Goal(f"streaming: kube-scheduler + extender binds every pod within "
                          f"{MAX_WAIT_GOAL:.0f} s of its creation (all had room)",
                          f"{worst:.2f} s", worst < MAX_WAIT_GOAL))
    made = _med([r["create_rate"] for r in results.get(("allocator", "streaming"), [])] or [0.0])
    if made > 0 and ceiling == ceiling and ("allocator", "streaming") in rate:
        # Streaming cannot bind faster than pods are made: what it can reach is the lower rate.
        a, reach = rate[("allocator", "streaming")], min(made, ceiling)
        goals.append(Goal(f"streaming: allocator pods/s ≥ {CEILING_GOAL:.0%} of what can be "
                          f"reached, the lower of the creation rate and the ceiling",
                          f"{a / reach:.0%}", a >= CEILING_GOAL * reach))
    tables = [Table(["scheduler", "how", "pods/s (median)", "per round", "s until all bound",
                     "created/s", "s to first bind (backlog) / last bind after last create (streaming)",
                     "bound (worst round)", "nodes used",
                     "create-to-bound s, p50 / p99 (medians) / max (worst round), streaming",
                     "CPU s per 1,000 pods: scheduler / API server / etcd"],
                    rows, f"{pods:,} pods on {nodes:,} nodes, medians of {rounds} rounds")]
    notes = []
    for label, prof in profiles.items():
        if not prof:
            continue
        tables.append(Table(["thread", "share of the samples"], prof["roles"],
                            f"py-spy on the {label}'s Python process, a backlog run of its own "
                            "after the rounds (100 samples/s, every thread while it runs): by "
                            "thread"))
        tables.append(Table(["frame", "share of samples (with callees)", "own"], prof["frames"],
                            "the same samples: top frames"))
    return Section(
        part="e2e", title=TITLE,
        intro=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        conditions=[
            ("cluster", f"etcd + kube-apiserver {ks_version} on 127.0.0.1, no kubelet or "
             "controller-manager"),
            ("nodes", f"{nodes:,} fake nodes × {workload.CARDS} cards (S4000/S5000 alternating), "
             "64 cpu, 512Gi, 110 pods"),
            ("pods", f"{pods:,} per run (bench/workload.py; the same requests for every "
             "scheduler, for kube-scheduler alone the cards' memory and cores as plain extended "
             f"resources), created by {THREADS} threads"),
            ("kube-scheduler", f"{ks_version}, v1beta1 config, qps 1000, burst 2000, "
             "default plugins"),
            ("allocator", "`python -m webhook.cli allocate`, default policies, "
             "memoryPerCard [96, 160]"),
            ("kube-scheduler + extender", f"{ks_version} (profile hami-scheduler, "
             "its own node sample as the chart's default, qps 1000, burst 2000, --v=1) calling "
             "`python -m webhook.cli extender` (filter reserves, requeues when the room is outside the sample, "
             "prioritize, bind; nodeCacheCapable), the pods in the allocator's form; CPU: both"),
            ("machine", f"{os.cpu_count()} CPUs shared by the API server, etcd, the scheduler "
             f"and the bench; Python {platform.python_version()}"),
        ],
        tables=tables, goals=goals, notes=notes)
