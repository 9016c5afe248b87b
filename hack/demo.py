"""Try it on a local API server: the webhook and the allocator place the examples on cards.

Run with `make demo`: etcd + kube-apiserver, fake MTT S4000 and MTT S5000 nodes, the webhook
(the mixed fleet's config) and the allocator; the examples are applied, the cards table
(`mthreads-webhook cards`) shows where they went, and a pod that fits nowhere shows why.
Everything listens on 127.0.0.1 and is stopped on exit; pass --keep to leave it running
(Ctrl-C stops it) and use the printed kubeconfig.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.allocator import ALLOCATOR_USER, AllocatorProcess, grant_allocator_rbac  # noqa: E402
from tests.harness.kube import ADMIN, LocalCluster, ensure_namespace, make_fake_node  # noqa: E402
from tests.harness.kubectl import kubectl  # noqa: E402
from tests.harness.registration import REPO_ROOT, webhook_configurations  # noqa: E402
from tests.harness.wait import wait_for  # noqa: E402
from tests.harness.webhook import WebhookProcess  # noqa: E402

EXAMPLES = REPO_ROOT / "manifests" / "examples" / "mthreads"
# 3 whole S5000 cards: the fleet's only S5000 node has 2
FITS_NOWHERE = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "three-s5000-cards",
                             "annotations": {"mthreads.com/card-model": "MTT-S5000"}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                         "resources": {"limits": {"mthreads.com/vgpu": "3"}}}]}}
FLEET = (("s4000-a", 4, 96), ("s4000-b", 2, 96), ("s5000-a", 2, 160))


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--keep", action="store_true", help="keep the cluster up until Ctrl-C")
    args.add_argument("--config", default=str(REPO_ROOT / "manifests/overlays/mixed/config.yaml"))
    opts = args.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mthreads-demo-"))
    print(f"starting etcd and kube-apiserver in {work} ...", flush=True)
    with LocalCluster(work / "kube") as cluster:
        admin = cluster.api_client(ADMIN)
        for name, cards, units in FLEET:
            make_fake_node(admin, name, cards, units)
        print("fake nodes: " + ", ".join(f"{n} ({c} x {u} units)" for n, c, u in FLEET))
        grant_allocator_rbac(admin)
        ensure_namespace(admin, "kube-system")
        allocator = AllocatorProcess(cluster.kubeconfig(ALLOCATOR_USER), "kube-system",
                                     work / "allocator.log", Path(opts.config)).start()
        webhook = WebhookProcess(work / "webhook", config=opts.config).start()
        try:
            allocator.wait_healthy()
            docs = webhook_configurations(webhook.url, webhook.ca)
            kubectl(cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
            kubectl(cluster, ADMIN, "create", "namespace", "demo")
            time.sleep(2)  # the API server picks up new webhook configurations in a moment
            placed = []
            for file in sorted(EXAMPLES.glob("*.yaml")) + sorted((EXAMPLES / "invalid").glob("*.yaml")):
                if show(cluster, file):
                    placed.append(yaml.safe_load(file.read_text())["metadata"]["name"])
            for name in placed:
                wait_bound(cluster, name)
            print(f"\n$ mthreads-webhook cards\n{cards_table(cluster)}")
            print("$ kubectl apply -f - <<< a pod asking for 3 whole MTT S5000 cards")
            out = kubectl(cluster, ADMIN, "apply", "-n", "demo", "-f", "-",
                          stdin=json.dumps(FITS_NOWHERE))
            print((out.stdout + out.stderr).strip())
            print(f"\n$ kubectl describe pod {FITS_NOWHERE['metadata']['name']}  (its events)")
            print(f"  {wait_reason(cluster, FITS_NOWHERE['metadata']['name'])}")
            print(f"\n$ mthreads-webhook cards\n{cards_table(cluster)}", end="")
            if opts.keep:
                print(f"\nkubeconfig: {cluster.kubeconfig(ADMIN)}  (Ctrl-C stops everything)")
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            webhook.stop()
            allocator.stop()
    return 0


def show(cluster, file: Path) -> bool:
    """Apply one example and show what the webhook made of it; False if it was denied."""
    rel = file.relative_to(REPO_ROOT)
    out = kubectl(cluster, ADMIN, "apply", "-n", "demo", "-f", str(file))
    print(f"\n$ kubectl apply -f {rel}\n{(out.stdout + out.stderr).strip()}")
    if out.returncode:
        return False
    name = yaml.safe_load(file.read_text())["metadata"]["name"]
    pod = get_pod(cluster, name)
    print(f"  schedulerName: {pod['spec']['schedulerName']}")
    for c in pod["spec"]["containers"]:
        res = {k: v for k, v in c.get("resources", {}).get("limits", {}).items() if "mthreads" in k}
        print(f"  container {c['name']}: {res}")
    for k, v in sorted(pod["metadata"].get("annotations", {}).items()):
        if "mthreads" in k:
            print(f"  {k}: {v}")
    return True


def get_pod(cluster, name: str) -> dict:
    return json.loads(kubectl(cluster, ADMIN, "get", "pod", name, "-n", "demo", "-o", "json").stdout)


def wait_bound(cluster, name: str, timeout: float = 30) -> None:
    try:
        wait_for(lambda: get_pod(cluster, name)["spec"].get("nodeName"), timeout, 0.3)
    except AssertionError:  # the demo goes on, saying why
        print(f"  ({name} not placed after {timeout:.0f} s: {wait_reason(cluster, name, 1)})")


def wait_reason(cluster, name: str, timeout: float = 30) -> str:
    """The FailedScheduling message the allocator writes on a pod that fits nowhere."""
    def events():
        out = kubectl(cluster, ADMIN, "get", "events", "-n", "demo", "-o", "json",
                      "--field-selector", f"involvedObject.name={name},reason=FailedScheduling")
        return json.loads(out.stdout or "{}").get("items") or []
    try:
        return f"Warning  FailedScheduling  {wait_for(events, timeout, 0.3)[-1]['message']}"
    except AssertionError:
        return "no FailedScheduling event yet"


def cards_table(cluster) -> str:
    out = subprocess.run([sys.executable, "-m", "webhook.cli", "cards",
                          "--kubeconfig", str(cluster.kubeconfig(ADMIN))],
                         capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    return out.stdout + out.stderr


if __name__ == "__main__":
    sys.exit(main())
