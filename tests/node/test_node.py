"""The user's document as the script, on a real node: helm installs the chart with the image from
`make image`, the kubelet runs its pods and the user's, and the fake device plugin is asked for
the cards the annotations name (tests/harness/node.py, tests/harness/device_plugin.py).

One cluster for the module (brought up once, torn down at the end), the tests in order: the
allocator mode first (install, the document's pod, upgrade with the S5000 values and a rollout
restart, the leader's pod deleted, a card failing under a churn of 200 pods), then the extender
mode (install, the document's pod, the leader's pod deleted, a shorter churn), then uninstall.

Stand-ins, since nothing can be pulled here: the document's example pod's `busybox:1.36` is the
project's own image under that name (it has `sleep`); the churn's pods run the pause image. The
device plugin's identity is added to `allocator.extraWriters` (a real device plugin needs that
too), the one value beyond the document's commands.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import kubernetes.client as k
import pytest
import requests
import yaml

from tests.chart.helm import CHART, EXAMPLES, REPO_ROOT, helm
from tests.harness.device_plugin import CORE, COUNT, MEMORY
from tests.harness.kube import ADMIN, ALICE, read_pod
from tests.harness.kubectl import kubectl
from tests.harness.node import (
    DEVICE_PLUGIN_USER,
    NODE_NAME,
    PAUSE_IMAGE,
    NodeCluster,
    NodeUnavailable,
)
from tests.harness.wait import wait_for
from tests.image.containers import build_image, podman

pytestmark = [pytest.mark.cluster, pytest.mark.image]

NS = "kube-system"
POD = REPO_ROOT / "manifests" / "examples" / "mthreads" / "gpushare-pod-default.yaml"
ONE_LINER = ("--set", "scheduler.kubeScheduler.image.tag=v1.20.2", "--set", "devices.mthreads.enabled=true")
WRITER = ("--set", f"allocator.extraWriters={{{DEVICE_PLUGIN_USER}}}")
PROJECT_IMAGE = "docker.io/library/mthreads-webhook:0.1.0"  # what the chart deploys by default
EXAMPLE_IMAGE = "docker.io/library/busybox:1.36"  # the example pod's
CARDS, UNITS = 2, 96
CHURN_SLICE = (4, 1)  # units, cores: 16 pods a card (its 16 shares), 32 on the node


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    work = tmp_path_factory.mktemp("node")
    image = build_image()  # `make image`: reused while the tree is unchanged
    cluster = NodeCluster(work / "kube", cards=CARDS, units=UNITS)
    try:
        cluster.start()
    except NodeUnavailable as e:
        pytest.fail(f"the one-node cluster cannot run on this machine: {e}")
    try:
        archive = work / "image.tar"
        podman("save", "--format", "docker-archive", "-o", str(archive), image, timeout=300)
        cluster.import_image(archive, PROJECT_IMAGE, image)
        cluster.ctr("images", "tag", "--force", PROJECT_IMAGE, EXAMPLE_IMAGE)
        print(f"node up: {cluster.timings}")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def admin(node):
    return node.api_client(ADMIN)


@pytest.fixture(scope="module")
def helm_run(node, tmp_path_factory):
    home = tmp_path_factory.mktemp("helm-home")
    kubeconfig = str(node.kubeconfig(ADMIN))

    def run(*args: str) -> subprocess.CompletedProcess:
        out = helm("--kubeconfig", kubeconfig, *args, home=home, timeout=300)
        assert out.returncode == 0, f"helm {' '.join(args)}: {out.stderr}"
        return out
    return run


@pytest.fixture(scope="module")
def team(node, admin):
    """Namespace `team` where alice may manage pods; kube-system out of the webhook's reach (1.20)."""
    for args in (("label", "namespace", NS, "hami.io/webhook=ignore", "--overwrite"),
                 ("create", "namespace", "team"),
                 ("create", "role", "pod-editor", "-n", "team", "--resource=pods",
                  "--verb=create,get,list,watch,update,patch,delete"),
                 ("create", "rolebinding", "alice-pods", "-n", "team", "--role=pod-editor", f"--user={ALICE}"),
                 ("create", "namespace", "churn"), ("create", "namespace", "bystanders")):
        out = kubectl(node, ADMIN, *args)
        assert out.returncode == 0, out.stderr
    return "team"


# -- helpers -----------------------------------------------------------------------------------


def core(admin) -> k.CoreV1Api:
    return k.CoreV1Api(admin)


def pods(admin, namespace: str, selector: str | None = None) -> list[dict]:
    resp = core(admin).list_namespaced_pod(namespace, label_selector=selector, _preload_content=False)
    return json.loads(resp.data)["items"]


def ready(pod: dict) -> bool:
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def wait_rolled_out(node, admin, deployment: str, timeout: float = 180) -> list[dict]:
    """The deployment rolled out: its pods all new, Running and Ready on the node, no old one
    left; them."""
    apps = k.AppsV1Api(admin)

    def done():
        d = apps.read_namespaced_deployment(deployment, NS)
        st = d.status
        if not (st.observed_generation == d.metadata.generation and st.updated_replicas == d.spec.replicas
                and st.ready_replicas == d.spec.replicas and st.replicas == d.spec.replicas):
            return None
        selector = ",".join(f"{a}={b}" for a, b in d.spec.selector.match_labels.items())
        # the old pods gone too: a terminating webhook pod still answers on its open connections
        mine = pods(admin, NS, selector)
        return mine if len(mine) == d.spec.replicas and all(
            ready(p) and not p["metadata"].get("deletionTimestamp") for p in mine) else None

    def why():
        lines = [f"{p['metadata']['name']}: {p['status'].get('phase')} "
                 f"{[c.get('state') for c in p['status'].get('containerStatuses') or []]}" for p in pods(admin, NS)]
        return f"deployment {deployment} rolled out and Ready:\n" + "\n".join(lines) + "\n" + node.log("kubelet", 10)

    found = wait_for(done, timeout, 1, what=why)
    for p in found:
        assert p["spec"]["nodeName"] == NODE_NAME
    return found


def lease_holder(admin, name: str) -> str:
    try:
        lease = k.CoordinationV1Api(admin).read_namespaced_lease(name, NS)
    except k.ApiException as e:
        if e.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def apply_as_alice(node, path: Path | str, stdin: str | None = None) -> subprocess.CompletedProcess:
    last = {"stderr": ""}

    def reached():
        out = kubectl(node, ALICE, "apply", "-n", "team", "-f", str(path), stdin=stdin)
        last["stderr"] = out.stderr
        return None if "failed calling webhook" in out.stderr else out

    return wait_for(reached, 60, 1, what=lambda: f"the API server reaching the webhook: {last['stderr']}")


def running_pod(node, admin, namespace: str, name: str, timeout: float = 90) -> dict:
    def running():
        p = read_pod(admin, namespace, name)
        assert p["status"].get("phase") != "Failed", f"{namespace}/{name} failed: {p['status']}"
        return p if p["status"].get("phase") == "Running" else None

    return wait_for(running, timeout, 0.5, what=lambda: f"{namespace}/{name} Running: "
                    f"{read_pod(admin, namespace, name)['status']}\n{node.log('kubelet', 10)}")


def check_placed_on_its_card(node, pod: dict) -> list[str]:
    """The pod's annotations name a card of the node, and the device plugin was asked, for each
    of the three resources, for that card and no other; the pod went to bind-phase success."""
    ann = pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == NODE_NAME
    allocated = ann["hami.io/mthreads-vgpu-devices-allocated"]
    card = allocated.split(",")[0]
    assert card.startswith(f"{NODE_NAME}-mthreads-"), allocated
    index = int(card.rsplit("-", 1)[1])
    assert ann["mthreads.com/gpu-index"] == str(index)
    assert ann["mthreads.com/predicate-node"] == NODE_NAME
    calls = node.device_plugin.calls_for(pod["metadata"]["uid"])
    assert sorted(c.resource for c in calls) == sorted([COUNT, MEMORY, CORE]), calls
    for c in calls:
        assert not c.error and c.cards == [index], c
    assert ann["hami.io/bind-phase"] == "success"
    return [card]


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{a}="{b}"' in line for a, b in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def leader_metrics(admin, lease: str) -> str:
    holder = lease_holder(admin, lease).split("_")[0]
    pod = read_pod(admin, NS, holder)
    return requests.get(f"http://{pod['status']['podIP']}:9090/metrics", timeout=5).text


# -- allocator mode ----------------------------------------------------------------------------

state: dict = {}


def test_the_documents_install_runs_on_the_node(node, admin, helm_run, team):
    helm_run("install", "hami", str(CHART), *ONE_LINER, *WRITER, "-n", NS)
    webhooks = wait_rolled_out(node, admin, "mthreads-webhook")
    schedulers = wait_rolled_out(node, admin, "hami-scheduler")
    assert len(webhooks) == 2 and len(schedulers) == 2
    # The Service the API server calls: a ClusterIP of the node's range, the webhook pods behind it.
    svc = core(admin).read_namespaced_service("mthreads-webhook", NS)
    assert svc.spec.cluster_ip.startswith("10.96.0.")
    ep = core(admin).read_namespaced_endpoints("mthreads-webhook", NS)
    assert sorted(a.ip for s in ep.subsets for a in s.addresses) == sorted(p["status"]["podIP"] for p in webhooks)
    # The allocator's leader, with its service account's token, holds the Lease.
    holder = wait_for(lambda: lease_holder(admin, "mthreads-allocator"), 60, 1, what="an allocator leading")
    assert holder.split("_")[0] in {p["metadata"]["name"] for p in schedulers}


def test_the_documents_pod_is_mutated_placed_admitted_and_running(node, admin):
    applied = apply_as_alice(node, POD)
    assert applied.returncode == 0, applied.stderr
    pod = running_pod(node, admin, "team", "gpushare-pod-default")
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert pod["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-to-allocate"] == ",Mthreads,16384,8:;"
    state["first"] = (pod["metadata"]["uid"], check_placed_on_its_card(node, pod))
    assert node.device_plugin.successes == ["team/gpushare-pod-default"]


def test_helm_upgrade_with_the_s5000_values_and_rollout_restart(node, admin, helm_run, tmp_path):
    before = {p["metadata"]["name"] for p in wait_rolled_out(node, admin, "hami-scheduler")}
    values = tmp_path / "values.yaml"  # the document's S5000 values file, as shipped
    values.write_text((EXAMPLES / "values-s5000.yaml").read_text())
    helm_run("upgrade", "hami", str(CHART), "-n", NS, "-f", str(values), *WRITER)
    restart = kubectl(node, ADMIN, "-n", NS, "rollout", "restart", "deploy/hami-scheduler")
    assert restart.returncode == 0, restart.stderr
    status = kubectl(node, ADMIN, "-n", NS, "rollout", "status", "deploy/hami-scheduler", "--timeout=180s",
                     timeout=200)
    assert status.returncode == 0, status.stdout + status.stderr
    after = wait_rolled_out(node, admin, "hami-scheduler")
    assert not before & {p["metadata"]["name"] for p in after}, "the pods did not roll"
    wait_rolled_out(node, admin, "mthreads-webhook")
    # The new config in effect: 128 units is valid for the MTT S5000 only.
    s5000 = apply_as_alice(node, POD.parent / "s5000-64gib-slice.yaml")
    assert s5000.returncode == 0, s5000.stderr
    # The first pod's placement is neither lost nor doubled: same pod, same card, counted once
    # by the new leader (which rebuilt its usage from the pods).
    pod = read_pod(admin, "team", "gpushare-pod-default")
    uid, cards = state["first"]
    assert pod["metadata"]["uid"] == uid and pod["status"]["phase"] == "Running"
    assert pod["metadata"]["annotations"]["hami.io/mthreads-vgpu-devices-allocated"].startswith(cards[0] + ",")

    def counted_once():
        text = leader_metrics(admin, "mthreads-allocator")
        return metric(text, "hami_gpu_memory_allocated_bytes", device_uuid=cards[0]) == 32 * 512 * 2**20
    wait_for(counted_once, 60, 1, what="the new leader counting the first pod's 16 GiB once",
             retry_on=(requests.RequestException, k.ApiException, KeyError))
    # The 96-unit cards are not MTT S5000 cards: the 128-unit slice waits.
    time.sleep(3)
    assert not read_pod(admin, "team", "s5000-64gib-slice")["spec"].get("nodeName")
    core(admin).delete_namespaced_pod("s5000-64gib-slice", "team", grace_period_seconds=0)
    helm_run("upgrade", "hami", str(CHART), *ONE_LINER, *WRITER, "-n", NS)  # back to the S4000 values
    wait_rolled_out(node, admin, "hami-scheduler")


def test_the_leaders_pod_deleted_the_standby_places_the_next_pod(node, admin):
    check_failover(node, admin, "mthreads-allocator", "after-allocator-failover")


def check_failover(node, admin, lease: str, name: str) -> None:
    old = wait_for(lambda: lease_holder(admin, lease), 60, 1, what=f"{lease} held")
    old_pod = old.split("_")[0]
    core(admin).delete_namespaced_pod(old_pod, NS)
    new = wait_for(lambda: (h := lease_holder(admin, lease)) and h.split("_")[0] != old_pod and h, 90, 0.5,
                   what=f"a standby taking {lease} over from {old_pod}")
    pod = yaml.safe_load(POD.read_text())
    pod["metadata"]["name"] = name
    applied = apply_as_alice(node, "-", stdin=json.dumps(pod))
    assert applied.returncode == 0, applied.stderr
    placed = running_pod(node, admin, "team", name)
    check_placed_on_its_card(node, placed)
    assert lease_holder(admin, lease).split("_")[0] == new.split("_")[0]
    core(admin).delete_namespaced_pod(name, "team", grace_period_seconds=0)


def churn_pod(name: str) -> dict:
    units, cores = CHURN_SLICE
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"churn": "yes"}},
            # Deleted gracefully, as `kubectl delete` does: a pod force-deleted (grace 0) as its
            # container dies is restarted by kubelet 1.20 once more, which asks the device plugin
            # for its devices again, for a pod it no longer counts (docs/node-tests.md).
            "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "enableServiceLinks": False, "containers": [{
                "name": "main", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                "resources": {"limits": {COUNT: "1", MEMORY: str(units), CORE: str(cores)}}}]}}


def churn(node, admin, total: int, window: int, fail_at: int, tag: str) -> dict:
    """`total` pods in namespace churn, at most `window` at a time (half of it once the card
    failed: what fits), each deleted once Running;
    card 1 turned unhealthy when `fail_at` pods were created. The kubelet must refuse none, and
    once the drop is reported the pods bound never ask for more than allocatable.

    The card fails while the node is quiet (every bound pod admitted, none
    terminating): a pod bound before the drop reached the API but admitted after it is refused
    by the kubelet whoever bound it (the race docs/allocator.md names), which this test does not
    measure. After the drop has been reported for 2 s, no such excuse remains: the pods bound
    by then (a pod the node's quiet left waiting may be bound before the allocator's watch
    brings the drop) count as bound before it, and only the pods bound since are held to it."""
    api = core(admin)
    alive: list[str] = []
    created = done_pods = 0
    dropped_at = None
    seen_over: list[str] = []
    deadline = time.monotonic() + 600

    def allocatable() -> dict[str, int]:
        a = api.read_node(NODE_NAME).status.allocatable
        return {r: int(a.get(r, "0")) for r in (COUNT, MEMORY, CORE)}

    def listed() -> dict[str, dict]:
        items = {p["metadata"]["name"]: p for p in pods(admin, "churn")}
        for p in items.values():
            assert p["status"].get("phase") != "Failed", f"the kubelet refused {p['metadata']['name']}: {p['status']}"
        return items

    def admitted(p: dict) -> bool:  # the device plugin answered the kubelet for it
        return (p["metadata"].get("annotations") or {}).get("hami.io/bind-phase") == "success"

    def quiet() -> bool:
        items = listed().values()
        return all(not p["metadata"].get("deletionTimestamp") and
                   (not p["spec"].get("nodeName") or admitted(p)) for p in items)

    full = allocatable()
    present = 0  # the namespace's pods at the last listing, terminating ones too
    while done_pods < total:
        assert time.monotonic() < deadline, f"the churn did not finish: {done_pods}/{total} pods done"
        # No more pods than fit (the terminating ones count until gone): a pod that does not fit
        # waits out the allocator's per-pod backoff (up to 10 s) and slows the churn down.
        room = (window if dropped_at is None else window // 2) - present
        while created < total and room > 0 and (created < fail_at or dropped_at is not None):
            name = f"{tag}-{created:03d}"
            api.create_namespaced_pod("churn", churn_pod(name))
            alive.append(name)
            created += 1
            room -= 1
            present += 1
        if created == fail_at and dropped_at is None:
            wait_for(lambda: quiet() and (time.sleep(1) or quiet()), 120, 0.5, what="the node quiet")
            node.device_plugin.set_health(1, False)
            failed_at = time.monotonic()
            wait_for(lambda: allocatable()[MEMORY] == full[MEMORY] - UNITS, 10, 0.2,
                     what="allocatable dropping within 10 s of the card failing")
            dropped_at = time.monotonic()
            print(f"allocatable dropped {dropped_at - failed_at:.1f} s after the card failed")
            dropped = allocatable()
            assert dropped == {COUNT: full[COUNT] - 16, MEMORY: full[MEMORY] - UNITS, CORE: full[CORE] - 16}
            time.sleep(2)  # the allocator's watch
            before_drop = {n for n, p in listed().items() if p["spec"].get("nodeName")}
            continue
        items = listed()
        present = len(items)
        if dropped_at is not None:
            # bound and neither ended nor deleted (the deleted ones' devices are on their way back)
            bound = [p for p in items.values() if p["spec"].get("nodeName") and not p["metadata"].get(
                "deletionTimestamp") and p["status"].get("phase") not in ("Succeeded", "Failed")]
            # The pods bound before the drop stay (nothing is evicted) until the test deletes
            # them; once any pod bound since is there, the sum must be within allocatable.
            if any(p["metadata"]["name"] not in before_drop for p in bound):
                for r in (COUNT, MEMORY, CORE):
                    asked = sum(int(p["spec"]["containers"][0]["resources"]["limits"][r]) for p in bound)
                    if asked > dropped[r]:
                        seen_over.append(f"{len(bound)} pods bound ask for {asked} {r}, allocatable {dropped[r]}")
        for name in list(alive):
            p = items.get(name)
            # Running, not only admitted: a pod deleted while its container starts makes kubelet
            # 1.20 allocate its devices again, from its pod worker, beside the admissions; two
            # Allocates at once can crash it (docs/node-tests.md).
            if p is not None and p["status"].get("phase") == "Running":
                api.delete_namespaced_pod(name, "churn")
                alive.remove(name)
                done_pods += 1
        time.sleep(0.3)
    assert dropped_at is not None, "allocatable never dropped after the card failed"
    wait_for(lambda: not listed(), 120, 1, what="the churn's pods gone")
    node.device_plugin.set_health(1, True)
    wait_for(lambda: allocatable() == full, 30, 0.5, what="allocatable back after the card recovered")
    return {"over": seen_over}


def test_a_card_failing_under_a_churn_of_200_pods(node, admin):
    started = time.monotonic()
    errors_before = len(node.device_plugin.errors())
    result = churn(node, admin, total=200, window=32, fail_at=60, tag="a")
    assert result["over"] == [], result["over"][:5]
    assert node.device_plugin.errors()[errors_before:] == []
    events = core(admin).list_namespaced_event("churn").items
    refused = [e.message for e in events if e.reason in ("UnexpectedAdmissionError", "OutOfmthreads.com/sgpu-memory",
                                                         "OutOfmthreads.com/sgpu-core", "OutOfmthreads.com/vgpu")]
    assert refused == []
    print(f"churn of 200 pods: {time.monotonic() - started:.0f} s")


# -- extender mode -----------------------------------------------------------------------------


def test_extender_mode_runs_kube_scheduler_as_the_charts_pod(node, admin, helm_run):
    core(admin).delete_namespaced_pod("gpushare-pod-default", "team", grace_period_seconds=0)
    wait_for(lambda: not pods(admin, "team"), 60, 0.5, what="the first pod gone")
    helm_run("upgrade", "hami", str(CHART), *ONE_LINER, *WRITER, "--set", "mode=extender", "-n", NS)
    schedulers = wait_rolled_out(node, admin, "hami-scheduler")
    for p in schedulers:
        assert [c["name"] for c in p["spec"]["containers"]] == ["kube-scheduler", "extender"]
        assert p["spec"]["serviceAccountName"] == "mthreads-scheduler"
    holder = wait_for(lambda: lease_holder(admin, "mthreads-scheduler"), 60, 1, what="a kube-scheduler leading")
    assert holder.split("_")[0] in {p["metadata"]["name"] for p in schedulers}

    applied = apply_as_alice(node, POD)
    assert applied.returncode == 0, applied.stderr
    pod = running_pod(node, admin, "team", "gpushare-pod-default")
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    check_placed_on_its_card(node, pod)


def test_extender_mode_the_leaders_pod_deleted_the_standby_places_the_next_pod(node, admin):
    check_failover(node, admin, "mthreads-scheduler", "after-extender-failover")


def test_extender_mode_a_card_failing_under_a_churn_of_40_pods(node, admin):
    errors_before = len(node.device_plugin.errors())
    result = churn(node, admin, total=40, window=32, fail_at=20, tag="e")
    assert result["over"] == [], result["over"][:5]
    assert node.device_plugin.errors()[errors_before:] == []


# -- uninstall ---------------------------------------------------------------------------------


def test_helm_uninstall_leaves_the_nodes_other_pods_running(node, admin, helm_run):
    bystander = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bystander"},
                 "spec": {"terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "main", "image": PAUSE_IMAGE, "imagePullPolicy": "Never"}]}}
    core(admin).create_namespaced_pod("bystanders", bystander)
    before = {(ns, name): running_pod(node, admin, ns, name)
              for ns, name in (("bystanders", "bystander"), ("team", "gpushare-pod-default"))}
    helm_run("uninstall", "hami", "-n", NS)
    wait_for(lambda: not pods(admin, NS, "app.kubernetes.io/name=mthreads-webhook"), 120, 1,
             what="the release's pods gone")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        left = kubectl(node, ADMIN, "get", kind, "-o", "name")
        assert "mthreads-webhook" not in left.stdout, left.stdout
    for (ns, name), was in before.items():
        now = read_pod(admin, ns, name)
        assert now["metadata"]["uid"] == was["metadata"]["uid"] and now["status"]["phase"] == "Running", name
        assert [c["restartCount"] for c in now["status"]["containerStatuses"]] == \
            [c["restartCount"] for c in was["status"]["containerStatuses"]], name
    # The cluster takes pods without the webhook: a tenant's plain pod runs.
    plain = {**bystander, "metadata": {"name": "after-uninstall"}}
    created = kubectl(node, ALICE, "create", "-n", "team", "-f", "-", stdin=json.dumps(plain))
    assert created.returncode == 0, created.stderr
    running_pod(node, admin, "team", "after-uninstall")
