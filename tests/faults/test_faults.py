"""Faults under a steady load (issue 6, part 5).

One rig for the module: the real webhook (gunicorn, TLS) registered from manifests/ (fail
closed), a mixed fleet of fake S4000/S5000 nodes, the allocator as a subprocess, a watch that
checks every pod event (tests/faults/rig.py) and a driver that creates ~10 pods/s as alice
and deletes random bound ones with gracePeriodSeconds=0. The tests run in order and inject:

1. SIGKILL of the webhook's gunicorn worker (twice): the master starts a new one;
2. a restart of kube-apiserver: the allocator resumes its watches, the webhook is untouched;
3. SIGKILL of the allocator at random moments, 8 times (each followed by a restart);
4. then the load stops, bound pods are deleted until every pod has been bound once.

After each fault, and at the end, the checker (tests/harness/invariants.py, its own reading of
the annotations) confirms: no card over its memory or cores, no exclusive card shared, no pod
bound twice or re-allocated, no half-done pod, and no pending pod left without either a binding
or PodScheduled=False/Unschedulable with the counted reasons.
Figures are printed with the prefix `FAULTS` (run with -s to see them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from pathlib import Path

import kubernetes.client as k
import pytest
import requests
import yaml

from tests.harness.allocator import AllocatorProcess, grant_allocator_rbac
from tests.harness.kube import ADMIN, ALICE, ALLOCATOR, ensure_namespace, make_fake_node
from tests.harness.kubectl import kubectl
from tests.harness.registration import REPO_ROOT, webhook_configurations
from tests.harness.wait import wait_for
from tests.harness.webhook import WebhookProcess

from .rig import FLEET_KEY, Driver, Kube, Tracker, fresh_card_problems, wait_pending_explained

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("FAULTS_SEED", "20240611"))
MIXED_CONFIG = REPO_ROOT / "manifests" / "overlays" / "mixed" / "config.yaml"
NODES_PER_MODEL, CARDS_PER_NODE = 4, 4
RATE = 10.0  # creates per second
POPULATION = 60  # live pods the deleter holds the namespace at
ALLOCATOR_KILLS = 8
PENDING_TIMEOUT = 45.0  # a pending pod is bound or explained within this after a fault
LEASE = "mthreads-allocator"


def emit(figure: str, **values) -> None:
    print(f"FAULTS {figure}: " + json.dumps(values, sort_keys=True))


class Rig:
    def __init__(self, cluster, workdir: Path):
        self.cluster, self.workdir = cluster, workdir
        self.ns = f"faults-{uuid.uuid4().hex[:6]}"
        self.admin = Kube(cluster.url, cluster.token(ADMIN), str(cluster.ca_file))
        self.alice = Kube(cluster.url, cluster.token(ALICE), str(cluster.ca_file))
        self.caps: dict[str, int] = {}
        self.nodes: set[str] = set()
        self.windows: list[tuple[str, float, float]] = []  # faults that may refuse creates
        self.checks = 0
        self.allocators: list[AllocatorProcess] = []
        self.alloc: AllocatorProcess | None = None
        self.server: WebhookProcess | None = None
        self.tracker: Tracker | None = None
        self.driver: Driver | None = None
        self.registered = False
        self.figures: dict = {}

    # setup
    def make_fleet(self, client) -> None:
        taint = {"key": FLEET_KEY, "value": self.ns, "effect": "NoSchedule"}
        core = k.CoreV1Api(client)
        for model, units in (("s4", 96), ("s5", 160)):
            for i in range(NODES_PER_MODEL):
                name = f"{self.ns}-{model}-{i}"
                make_fake_node(client, name, CARDS_PER_NODE, units, labels={FLEET_KEY: self.ns},
                               taints=[taint])
                # NodeTaint adds node.kubernetes.io/not-ready; no controller-manager removes it
                core.patch_node(name, {"spec": {"taints": [taint]}})
                self.nodes.add(name)
                self.caps.update({f"{name}-mthreads-{c}": units * 512 for c in range(CARDS_PER_NODE)})

    def grant_alice(self, client) -> None:
        rbac = k.RbacAuthorizationV1Api(client)
        rbac.create_namespaced_role(self.ns, {
            "metadata": {"name": "pod-editor"},
            "rules": [{"apiGroups": [""], "resources": ["pods"],
                       "verbs": ["create", "get", "list", "watch", "update", "patch", "delete"]}]})
        rbac.create_namespaced_role_binding(self.ns, {
            "metadata": {"name": "alice-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-editor"},
            "subjects": [{"kind": "User", "name": ALICE}]})

    def start_webhook(self) -> None:
        self.server = WebhookProcess(self.workdir / "webhook", config=str(MIXED_CONFIG)).start()
        docs = webhook_configurations(self.server.url, self.server.ca)
        applied = kubectl(self.cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        self.registered = True
        assert applied.returncode == 0, applied.stderr
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                 "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
                                          "resources": {"limits": {"mthreads.com/vgpu": "1"}}}]}}
        def mutated() -> bool:  # alice's role and the new configurations take a moment
            r = self.alice.request("POST", f"/api/v1/namespaces/{self.ns}/pods?dryRun=All", json=probe)
            return r.status_code == 201 and r.json()["spec"].get("schedulerName") == "hami-scheduler"
        wait_for(mutated, 30, 0.3, "the webhook mutates alice's dry-run pod")

    def start_allocator(self) -> AllocatorProcess:
        log = self.workdir / f"allocator-{len(self.allocators)}.log"
        self.alloc = AllocatorProcess(self.cluster.kubeconfig(ALLOCATOR), self.ns, log,
                                      MIXED_CONFIG).start()
        self.allocators.append(self.alloc)
        return self.alloc

    def wait_leading(self, timeout: float = 30) -> float:
        return self.alloc.wait_leading(timeout)

    def delete_lease(self) -> None:
        r = self.admin.request(
            "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases/{LEASE}")
        assert r.status_code in (200, 404), r.text

    # the checker
    def check(self, after: str) -> dict:
        # first the backlog the fault left (so the fleet is full again), then a fresh list
        pending, took = wait_pending_explained(self.tracker, PENDING_TIMEOUT)
        count, problems = fresh_card_problems(self.admin, self.caps, self.nodes)
        assert not problems, f"after {after}: " + "; ".join(problems[:10])
        assert not self.tracker.violations, f"after {after}: " + "; ".join(self.tracker.violations[:10])
        self.checks += 1
        return {"bound_pods_checked": count, "pending_checked": pending,
                "pending_explained_in_s": round(took, 1)}

    def teardown(self) -> None:
        steps = [
            lambda: self.driver and self.driver.close(),
            *[lambda a=a: a.stop(timeout=10) for a in self.allocators],
            lambda: self.tracker and self.tracker.close(),
            # fail-closed configurations must not outlive the webhook
            lambda: self.registered and kubectl(
                self.cluster, ADMIN, "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "mthreads-webhook", "--ignore-not-found"),
            lambda: self.server and self.server.stop(),
            lambda: self.admin.request("DELETE", f"/api/v1/namespaces/{self.ns}/pods",
                                       json={"gracePeriodSeconds": 0}),
            *[lambda n=n: self.admin.request("DELETE", f"/api/v1/nodes/{n}") for n in self.nodes],
        ]
        errors = []
        for step in steps:  # every step runs, whatever an earlier one raised
            try:
                step()
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
        if errors:
            print("FAULTS teardown errors: " + "; ".join(errors))


@pytest.fixture(scope="module")
def rig(kube_cluster, tmp_path_factory):
    rig = Rig(kube_cluster, tmp_path_factory.mktemp("faults"))
    client = kube_cluster.api_client(ADMIN)
    try:
        grant_allocator_rbac(client)
        ensure_namespace(client, rig.ns)
        rig.grant_alice(client)
        rig.make_fleet(client)
        rig.start_webhook()
        rig.tracker = Tracker(rig.admin, rig.ns, rig.caps).start()
        rig.start_allocator()
        rig.wait_leading()
        rig.driver = Driver(rig.alice, rig.admin, rig.tracker, rig.ns, rig.ns, SEED, rate=RATE,
                            target=POPULATION).start()
        yield rig
    finally:
        rig.teardown()
        for a in rig.allocators[-2:]:
            print(f"--- {a.log_path.name} (tail) ---\n{a.tail(15)}")


def by_category(failed) -> dict:
    """{category: [count, one example]} of failed creates."""
    out: dict = {}
    for o in failed:
        out.setdefault(o.category, [0, o.detail[:160]])[0] += 1
    return out


def first_ok_after(driver: Driver, t: float) -> float | None:
    done = [o.end for o in driver.creates if o.ok and o.start > t]
    return min(done) if done else None


def test_1_webhook_worker_sigkill(rig):
    time.sleep(4)  # the load settles
    server, driver = rig.server, rig.driver
    for round_ in range(2):
        (worker,) = server.workers()
        t_kill = time.monotonic()
        os.kill(worker, signal.SIGKILL)
        new = wait_for(lambda: [p for p in server.workers() if p != worker], 15, 0.05, "gunicorn starts a new worker")
        t_worker = time.monotonic()
        wait_for(lambda: server.session.get(f"{server.url}/readyz", timeout=1).status_code == 200,
                 15, 0.05, "the new worker answers /readyz", retry_on=(requests.RequestException,))
        t_ready = time.monotonic()
        wait_for(lambda: first_ok_after(driver, t_ready), 15, 0.05, "creates succeed again")
        time.sleep(3)  # let late failures of the gap arrive
        assert server.proc.poll() is None, "the gunicorn master died"
        window_end = time.monotonic()
        rig.windows.append((f"webhook worker kill {round_}", t_kill - 0.5, window_end))
        failed = driver.failures(t_kill - 0.5, window_end)
        tried = driver.outcomes(t_kill - 0.5, window_end)
        figures = {
            "worker_respawned_in_s": round(t_worker - t_kill, 2),
            "ready_in_s": round(t_ready - t_kill, 2),
            "creates_tried": len(tried), "creates_failed": len(failed),
            "failed_by": by_category(failed),
            "failed_span_s": round(max(o.end for o in failed) - t_kill, 2) if failed else 0.0,
            "new_worker": new != [worker],
        }
        figures.update(rig.check(f"webhook worker kill {round_}"))
        rig.figures.setdefault("webhook_worker_kills", []).append(figures)
        emit(f"webhook worker kill {round_}", **figures)
        assert t_ready - t_kill < 10, "the webhook took more than 10 s to serve again"
        assert all(o.category in ("webhook", "timeout") for o in failed), \
            [o.detail for o in failed if o.category not in ("webhook", "timeout")][:3]
        time.sleep(3)


def test_2_apiserver_restart(rig, kube_cluster):
    server, driver, alloc = rig.server, rig.driver, rig.alloc
    workers = server.workers()
    leading_before = rig.alloc.log().count("leading: listing nodes and pods")
    t0 = time.monotonic()
    kube_cluster.restart_apiserver()
    t1 = time.monotonic()
    t_ok = wait_for(lambda: first_ok_after(driver, t1), 30, 0.05, "creates succeed after the restart")
    # a pod created after the restart gets bound by the same allocator process
    created_after = lambda: [r for r in rig.tracker.all() if r.first_seen > t1]  # noqa: E731
    wait_for(lambda: any(r.node for r in created_after()), 40, 0.05,
            "the allocator binds a pod created after the restart")
    t_bound = min(r.bound_at for r in created_after() if r.node)
    time.sleep(2)
    window_end = time.monotonic()
    rig.windows.append(("apiserver restart", t0 - 0.5, window_end))
    assert alloc.proc.poll() is None, "the allocator died with the API server"
    assert rig.alloc is alloc
    assert server.proc.poll() is None and server.workers() == workers, "the webhook was affected"
    failed = driver.failures(t0 - 0.5, window_end)
    log = alloc.log()
    figures = {
        "apiserver_down_s": round(t1 - t0, 1),
        "first_create_ok_after_s": round(t_ok - t1, 2),
        "first_bind_after_s": round(t_bound - t1, 2),
        "creates_failed": len(failed),
        "failed_by": by_category(failed),
        "allocator_watch_retries": log.count("watch pod") + log.count("watch node"),
        "allocator_relisted_as_new_leader":
            log.count("leading: listing nodes and pods") - leading_before,
        "tracker_relists": rig.tracker.relists, "webhook_workers_unchanged": True,
    }
    figures.update(rig.check("apiserver restart"))
    rig.figures["apiserver_restart"] = figures
    emit("apiserver restart", **figures)
    assert not [o for o in failed if o.category == "webhook"], \
        [o.detail for o in failed if o.category == "webhook"][:3]


def test_3_allocator_sigkills(rig):
    rng = random.Random(SEED + 3)
    natural = {4}  # after this kill the next allocator waits for the lease to expire
    early = {2, 6}  # these kills hit a fresh process during its start (import, list, lease)
    kills = []
    for i in range(ALLOCATOR_KILLS):
        if i in early:
            time.sleep(rng.uniform(0.3, 2.5))
        else:
            time.sleep(rng.uniform(0.5, 3.0))
        victim = rig.alloc
        was_leading = victim.metric("mthreads_allocator_leader") == 1
        backlog = len(rig.tracker.pending())
        victim.kill()  # SIGKILL by PID, reaped
        t_kill = time.monotonic()
        if i not in natural:
            # the holder is dead (reaped above): drop its lease rather than wait 15 s for it
            rig.delete_lease()
        rig.start_allocator()
        if i + 1 in early:  # no check in between: the next kill hits this process while it starts
            kills.append({"kill": i, "was_leading": was_leading, "pending_at_kill": backlog,
                          "lease": "expired" if i in natural else "deleted"})
            continue
        took = rig.wait_leading(timeout=45 if i in natural else 30)
        figures = {"kill": i, "was_leading": was_leading, "pending_at_kill": backlog,
                   "lease": "expired" if i in natural else "deleted",
                   "leading_after_s": round(time.monotonic() - t_kill, 1),
                   "start_to_leading_s": round(took, 1)}
        figures.update(rig.check(f"allocator kill {i}"))
        kills.append(figures)
        emit(f"allocator kill {i}", **figures)
    rig.figures["allocator_kills"] = kills
    failed = [o for o in rig.driver.failures()
              if not any(s <= o.end and o.start <= e for _, s, e in rig.windows)]
    assert not failed, f"creates refused outside the webhook/API server faults: " \
                       f"{[o.detail for o in failed][:3]}"


def test_4_drain_and_final_check(rig):
    driver, tracker = rig.driver, rig.tracker
    driver.finish_creating()
    load_s = driver.create_stopped - driver.started
    deletes_under_load = driver.deletes
    t0 = time.monotonic()
    # no more creates: the deleter removes every bound pod, so the fleet has room for each
    # pending one; every pod admitted must get bound.
    while tracker.live() and time.monotonic() - t0 < 90:
        time.sleep(0.5)
        if int(time.monotonic() - t0) % 10 == 0:
            count, problems = fresh_card_problems(rig.admin, rig.caps, rig.nodes)
            assert not problems, "; ".join(problems[:10])
    drain_s = time.monotonic() - t0
    driver.close()
    records = tracker.all()
    never_bound = [r.name for r in records if not r.node]
    created = driver.outcomes()
    ok = [o for o in created if o.ok]
    failed = [o for o in created if not o.ok]
    down = sum(e - s for name, s, e in rig.windows if name == "apiserver restart")
    figures = {
        "creates_per_s_apiserver_up": round(len(ok) / (load_s - down), 2),
        "load_s": round(load_s, 1), "creates_ok": len(ok), "creates_failed": by_category(failed),
        "creates_per_s": round(len(ok) / load_s, 2),
        "deletes_per_s": round(deletes_under_load / load_s, 2),
        "deletes_total": driver.deletes, "delete_errors": driver.delete_errors,
        "pods_seen": len(records), "pods_never_bound": len(never_bound),
        "drain_s": round(drain_s, 1), "checks": rig.checks + 1,
        "watch_events": tracker.events, "violations": len(tracker.violations),
        "allocator_processes": len(rig.allocators),
        "creators_held_back_s": round(driver.held_back, 1),
    }
    rig.figures["final"] = figures
    emit("final", **figures)
    (rig.workdir / "figures.json").write_text(json.dumps(rig.figures, indent=1))
    assert not tracker.violations, "; ".join(tracker.violations[:10])
    assert not never_bound, f"{len(never_bound)} pods never bound: {never_bound[:10]}"
    assert not tracker.live(), "pods left after the drain"
    # every create the API server accepted is a pod the watch saw (and saw bound)
    assert driver.created_names <= {r.name for r in records}
    for a in rig.allocators:
        assert "Traceback" not in a.log(), a.log_path.name
    rig.checks += 1
