"""The pieces of the fault tests: a plain HTTP client, a pod watch that checks every event,
a bounded create/delete driver and the checks. None of it imports webhook code: the
allocation annotations are read by tests/harness/invariants.py, with a few lines of its own.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field

import requests

from tests.harness import invariants
from tests.harness.wait import time_until

KIND_LABEL = "faults.mthreads/kind"  # whole | slice: what the pod asked for
FLEET_KEY = "faults.mthreads/fleet"  # node label + taint: only our pods go to our nodes
ALLOCATED = invariants.ALLOCATED
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
# The table of SPEC 4 (bind-phase left out: a device plugin may update it).
TABLE = (ALLOCATED, "mthreads.com/gpu-index", "mthreads.com/predicate-node", "hami.io/vgpu-node",
         "mthreads.com/predicate-time", "hami.io/vgpu-time", "hami.io/bind-time")
MIB_PER_UNIT = 512
SCHEDULER = "hami-scheduler"
UNSCHEDULABLE_MESSAGE = re.compile(r"^0/\d+ nodes are available")


class Kube:
    """Bearer-token JSON over HTTPS, one requests session per thread."""

    def __init__(self, url: str, token: str, ca_file: str):
        self.url, self.token, self.ca = url, token, ca_file
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        s = getattr(self._local, "s", None)
        if s is None:
            s = requests.Session()
            s.trust_env = False
            s.verify = self.ca
            s.headers["Authorization"] = f"Bearer {self.token}"
            self._local.s = s
        return s

    def request(self, method: str, path: str, timeout: float = 15, **kw) -> requests.Response:
        return self.session.request(method, self.url + path, timeout=timeout, **kw)


# -- the checker (tests/harness/invariants.py), with what the pods' labels say -------------------

def whole_cards(pod: dict) -> int | None:
    """How many cards a pod of the driver asked for exclusively (None: a slice pod)."""
    if (pod["metadata"].get("labels") or {}).get(KIND_LABEL) != "whole":
        return None
    return int((pod["metadata"].get("annotations") or {}).get("mthreads.com/request-gpu-num") or 1)


def card_problems(pods: list[dict], caps: dict[str, int]) -> list[str]:
    return invariants.card_problems(pods, caps, whole_cards)[1]


def unschedulable_reason(pod: dict) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled" and c.get("status") == "False" \
                and c.get("reason") == "Unschedulable" and c.get("message"):
            return c["message"]
    return None


# -- the watch ------------------------------------------------------------------------------------

@dataclass
class Record:
    uid: str
    name: str
    kind: str
    first_seen: float
    node: str | None = None
    table: dict | None = None  # the allocation annotations, once set
    bound_at: float | None = None
    gone: bool = False
    last: dict = field(default_factory=dict)


class Tracker:
    """Watches the pods of one namespace (resuming, relisting on 410) and checks every event:
    nodeName and the allocation never change once set, no allocation without a node, no pod
    stored without the webhook's mutation, and no card over-committed in the watched state.
    (Watch events come in resourceVersion order, so every state between two events is one the
    API server really had.)"""

    def __init__(self, kube: Kube, namespace: str, caps: dict[str, int]):
        self.kube, self.ns, self.caps = kube, namespace, caps
        self.records: dict[str, Record] = {}
        self.alive: dict[str, Record] = {}  # the records not gone
        self.by_node: dict[str, set[str]] = {}
        self.violations: list[str] = []
        self.events = 0
        self.relists = 0
        self.breaks = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-tracker", daemon=True)

    def start(self) -> "Tracker":
        self._thread.start()
        assert self.synced.wait(30), "the tracker never listed the pods"
        return self

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=20)

    # views (copies, under the lock)
    def live(self) -> list[Record]:
        with self.lock:
            return list(self.alive.values())

    def bound_live(self) -> list[Record]:
        return [r for r in self.live() if r.node]

    def pending(self) -> list[Record]:
        return [r for r in self.live() if not r.node]

    def all(self) -> list[Record]:
        with self.lock:
            return list(self.records.values())

    # the loop
    def _path(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    def _run(self) -> None:
        rv = None
        while not self.stop.is_set():
            try:
                if rv is None:
                    r = self.kube.request("GET", self._path(), timeout=20)
                    r.raise_for_status()
                    body = r.json()
                    self._relist(body.get("items") or [])
                    rv = body["metadata"]["resourceVersion"]
                    self.synced.set()
                rv = self._watch(rv)
            except (requests.RequestException, ValueError, KeyError):
                self.breaks += 1
                self.stop.wait(0.3)

    def _watch(self, rv: str) -> str | None:
        params = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                  "timeoutSeconds": "5"}
        with self.kube.session.get(self.kube.url + self._path(), params=params, stream=True,
                                   timeout=(5, 30)) as r:
            if r.status_code == 410:
                return None
            r.raise_for_status()
            for line in r.iter_lines(chunk_size=None):
                if not line:
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise ValueError(obj.get("message"))
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "BOOKMARK":
                    with self.lock:
                        self._event(ev["type"], obj)
                if self.stop.is_set():
                    break
        return rv

    def _relist(self, items: list[dict]) -> None:
        with self.lock:
            self.relists += 1
            present = {p["metadata"]["uid"] for p in items}
            for uid, rec in list(self.alive.items()):
                if uid not in present:
                    self._gone(rec)
            for p in items:
                self._event("MODIFIED", p)

    def _gone(self, rec: Record) -> None:
        rec.gone = True
        self.alive.pop(rec.uid, None)
        if rec.node:
            self.by_node.get(rec.node, set()).discard(rec.uid)

    def _event(self, kind: str, pod: dict) -> None:
        self.events += 1
        meta = pod["metadata"]
        uid, name = meta["uid"], meta["name"]
        rec = self.records.get(uid)
        if rec is None:
            rec = self.records[uid] = Record(uid, name, (meta.get("labels") or {}).get(KIND_LABEL, "?"),
                                             time.monotonic())
            self.alive[uid] = rec
            spec = pod.get("spec") or {}
            ann = meta.get("annotations") or {}
            if spec.get("schedulerName") != SCHEDULER or TO_ALLOCATE not in ann:
                self.violations.append(f"{name}: stored without the webhook's mutation "
                                       f"(schedulerName {spec.get('schedulerName')!r})")
        rec.last = pod
        if kind == "DELETED" or rec.gone:  # (a late event of a pod already gone)
            self._gone(rec)
            return
        node = (pod.get("spec") or {}).get("nodeName")
        ann = meta.get("annotations") or {}
        table = {k: ann[k] for k in TABLE if k in ann} or None
        if rec.node and node != rec.node:
            self.violations.append(f"{name}: nodeName {rec.node} -> {node}")
        if rec.table and table != rec.table:
            self.violations.append(f"{name}: allocation changed {rec.table} -> {table}")
        if table and not node:
            self.violations.append(f"{name}: allocation {table} without a node (half-done)")
        if node and rec.node is None:
            rec.node, rec.bound_at = node, time.monotonic()
            self.by_node.setdefault(node, set()).add(uid)
            on_node = [self.records[u].last for u in self.by_node[node]]
            for problem in card_problems(on_node, self.caps):
                self.violations.append(f"watch: {problem}")
        if table and rec.table is None:
            rec.table = table


# -- the driver -----------------------------------------------------------------------------------

@dataclass
class Outcome:
    start: float
    end: float
    ok: bool
    category: str  # ok | webhook | apiserver | forbidden | timeout | denied | other
    detail: str = ""


def classify(status: int | None, text: str) -> str:
    if status is None:
        return "apiserver"
    if 200 <= status < 300:
        return "ok"
    if "failed calling webhook" in text:
        return "webhook"
    if "denied the request" in text:
        return "denied"
    if status == 403:  # RBAC's cache is not synced yet for a moment after an API server start
        return "forbidden"
    if status in (500, 503, 504) or "etcdserver" in text:
        return "apiserver"
    return "other"


def random_pod(rng: random.Random, name: str, fleet: str) -> dict:
    """A pod as a user writes it: counts only for whole cards (the webhook fills in the rest)."""
    annotations, r = {}, rng.random()

    def container(cname: str, limits: dict) -> dict:
        return {"name": cname, "image": "busybox:1.36", "resources": {"limits": limits}}

    if r < 0.14:
        kind, containers = "whole", [container("w", {"mthreads.com/vgpu": "1"})]  # an S4000
    elif r < 0.20:
        kind, containers = "whole", [container("w", {"mthreads.com/vgpu": "1"})]
        annotations["mthreads.com/card-model"] = "MTT-S5000"
    elif r < 0.23:
        kind, containers = "whole", [container("w", {"mthreads.com/vgpu": "2"})]
    elif r < 0.33:
        kind = "slice"
        a = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": str(rng.choice([8, 16, 32])),
             "mthreads.com/sgpu-core": str(rng.choice([2, 4]))}
        b = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4", "mthreads.com/sgpu-core": "1"}
        containers = [container("a", a), container("b", b)]
    else:
        kind = "slice"
        limits = {"mthreads.com/vgpu": "1",
                  "mthreads.com/sgpu-memory": str(rng.choice([4, 8, 16, 16, 32, 32, 64, 96, 128]))}
        cores = rng.choice([None, 1, 2, 4, 8])
        if cores:
            limits["mthreads.com/sgpu-core"] = str(cores)
        containers = [container("a", limits)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {KIND_LABEL: kind}, "annotations": annotations},
            "spec": {"containers": containers, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {FLEET_KEY: fleet},
                     "tolerations": [{"key": FLEET_KEY, "operator": "Equal", "value": fleet,
                                      "effect": "NoSchedule"}]}}


class Driver:
    """Creates pods at a steady rate as a normal user (through the webhooks) and deletes random
    bound ones (gracePeriodSeconds=0) to hold the population near `target`. Bounded: it stops by
    itself after `max_seconds` or `max_pods` creates, and holds back while `max_live` pods are
    live (after an allocator outage), so the backlog stays bounded."""

    def __init__(self, user: Kube, admin: Kube, tracker: Tracker, namespace: str, fleet: str,
                 seed: int, rate: float = 10.0, target: int = 60, floor: int = 20,
                 max_live: int = 120, max_seconds: float = 420, max_pods: int = 4000,
                 threads: int = 2):
        self.user, self.admin, self.tracker = user, admin, tracker
        self.ns, self.fleet = namespace, fleet
        self.rng = random.Random(seed)
        self.rate, self.target, self.floor, self.threads = rate, target, floor, threads
        self.max_seconds, self.max_pods, self.max_live = max_seconds, max_pods, max_live
        self.held_back = 0.0  # seconds a creator waited because max_live pods were live
        self.creates: list[Outcome] = []
        self.created_names: set[str] = set()
        self.deletes = 0
        self.delete_errors = 0
        self.stop_creating = threading.Event()
        self.stop = threading.Event()
        self._seq = itertools.count()
        self._deleting: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.started = self.create_stopped = self.stopped = 0.0

    def start(self) -> "Driver":
        self.started = time.monotonic()
        for i in range(self.threads):
            self._threads.append(threading.Thread(target=self._creator, args=(i,),
                                                  name=f"faults-create-{i}", daemon=True))
        self._threads.append(threading.Thread(target=self._deleter, name="faults-delete", daemon=True))
        for t in self._threads:
            t.start()
        return self

    def finish_creating(self) -> None:
        self.stop_creating.set()
        for t in self._threads[:-1]:
            t.join(timeout=30)
        self.create_stopped = self.create_stopped or time.monotonic()

    def close(self) -> None:
        self.stop_creating.set()
        self.stop.set()
        for t in self._threads:
            t.join(timeout=30)
        self.create_stopped = self.create_stopped or time.monotonic()
        self.stopped = self.stopped or time.monotonic()

    def _expired(self) -> bool:
        return time.monotonic() - self.started > self.max_seconds

    def _creator(self, index: int) -> None:
        period = self.threads / self.rate
        due = time.monotonic() + index * period / self.threads
        while not (self.stop_creating.is_set() or self.stop.is_set() or self._expired()):
            now = time.monotonic()
            if due > now:
                self.stop_creating.wait(due - now)
                continue
            if len(self.tracker.alive) >= self.max_live:  # back-pressure: a bounded backlog
                self.stop_creating.wait(0.1)
                self.held_back += 0.1 / self.threads
                due = time.monotonic()
                continue
            due = max(due + period, now - 1.0)  # never burst more than a second's worth
            n = next(self._seq)
            if n >= self.max_pods:
                break
            with self._lock:
                pod = random_pod(self.rng, f"p-{n:05d}", self.fleet)
            self._create(pod)
        self.create_stopped = self.create_stopped or time.monotonic()

    def _create(self, pod: dict) -> None:
        t0 = time.monotonic()
        status, text = None, ""
        try:
            r = self.user.request("POST", f"/api/v1/namespaces/{self.ns}/pods", json=pod, timeout=20)
            status, text = r.status_code, r.text[:300]
        except requests.Timeout as e:
            text = f"timeout: {e}"
        except requests.RequestException as e:
            text = f"{type(e).__name__}: {e}"[:300]
        t1 = time.monotonic()
        category = "timeout" if text.startswith("timeout") else classify(status, text)
        if category == "ok":
            self.created_names.add(pod["metadata"]["name"])
        self.creates.append(Outcome(t0, t1, category == "ok", category, f"{status} {text}"))

    def _deleter(self) -> None:
        """Deletes while the namespace holds more than `target` live pods, at most `rate` x 1.5
        a second; under load it keeps at least `floor` pods bound (deleting then only two a
        second), so that a backlog after an allocator outage does not empty the fleet."""
        last = 0.0
        while not self.stop.is_set() and time.monotonic() - self.started < self.max_seconds + 120:
            draining = self.stop_creating.is_set()
            live = self.tracker.live()
            bound = [r for r in live if r.node and r.uid not in self._deleting]
            in_flight = sum(1 for r in live if r.uid in self._deleting)
            excess = len(live) - in_flight - (0 if draining else self.target)
            gap = 0.5 if len(bound) <= self.floor and not draining else 1 / (1.5 * self.rate)
            if excess <= 0 or not bound or time.monotonic() - last < gap:
                self.stop.wait(0.02)
                continue
            last = time.monotonic()
            victim = self.rng.choice(bound)
            self._deleting.add(victim.uid)
            try:
                r = self.admin.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{victim.name}",
                                       json={"gracePeriodSeconds": 0,
                                             "preconditions": {"uid": victim.uid}}, timeout=10)
                if r.status_code in (200, 202, 404, 409):
                    self.deletes += r.status_code in (200, 202)
                else:
                    self.delete_errors += 1
                    self._deleting.discard(victim.uid)
            except requests.RequestException:
                self.delete_errors += 1
                self._deleting.discard(victim.uid)
                self.stop.wait(0.3)

    # figures
    def outcomes(self, start: float = 0.0, end: float = float("inf")) -> list[Outcome]:
        return [o for o in list(self.creates) if o.end >= start and o.start <= end]

    def failures(self, start: float = 0.0, end: float = float("inf")) -> list[Outcome]:
        return [o for o in self.outcomes(start, end) if not o.ok]


# -- checks -----------------------------------------------------------------------------------------

def fresh_card_problems(admin: Kube, caps: dict[str, int], nodes: set[str]) -> tuple[int, list[str]]:
    """The same check on a fresh list of every pod of the cluster bound to our nodes."""
    r = admin.request("GET", "/api/v1/pods", timeout=30)
    r.raise_for_status()
    pods = [p for p in r.json()["items"] if (p.get("spec") or {}).get("nodeName") in nodes
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    problems = card_problems(pods, caps)
    for p in pods:  # nothing else may sit on our tainted nodes
        if (p["metadata"].get("labels") or {}).get(KIND_LABEL) is None:
            problems.append(f"foreign pod {p['metadata']['namespace']}/{p['metadata']['name']} "
                            f"on {p['spec']['nodeName']}")
    return len(pods), problems


def wait_pending_explained(tracker: Tracker, timeout: float) -> tuple[int, float]:
    """Every pod pending now gets bound, or carries PodScheduled=False/Unschedulable with the
    counted reasons, within `timeout`. Returns (pods checked, seconds it took)."""
    snapshot = {r.uid for r in tracker.pending()}
    open_: list[Record] = []

    def explained() -> bool:
        nonlocal open_
        with tracker.lock:
            open_ = [r for u in snapshot if not (r := tracker.records[u]).gone and not r.node
                     and not (unschedulable_reason(r.last) or "")]
            bad = [(r.name, m) for u in snapshot if not (r := tracker.records[u]).node
                   and (m := unschedulable_reason(r.last)) and not UNSCHEDULABLE_MESSAGE.match(m)]
        assert not bad, f"Unschedulable with an unexpected message: {bad[:5]}"
        return not open_

    took = time_until(explained, timeout, 0.2, what=lambda: (
        f"the pending pods bound or Unschedulable; {len(open_)} of {len(snapshot)} are neither: "
        + ", ".join(f"{r.name} conditions={(r.last.get('status') or {}).get('conditions')}"
                    for r in open_[:5])))
    return len(snapshot), took
