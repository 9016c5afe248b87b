"""Try it on a local API server: etcd + kube-apiserver, the webhook, the examples applied.

Run with `make demo`. Everything listens on 127.0.0.1 and is stopped on exit; pass --keep to
leave it running (Ctrl-C stops it) and use the printed kubeconfig.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.kube import ADMIN, LocalCluster  # noqa: E402
from tests.harness.kubectl import kubectl  # noqa: E402
from tests.harness.registration import REPO_ROOT, webhook_configurations  # noqa: E402
from tests.harness.webhook import WebhookProcess  # noqa: E402

EXAMPLES = REPO_ROOT / "manifests" / "examples" / "mthreads"


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--keep", action="store_true", help="keep the cluster up until Ctrl-C")
    args.add_argument("--config", default=str(REPO_ROOT / "manifests/overlays/mixed/config.yaml"))
    opts = args.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mthreads-demo-"))
    print(f"starting etcd and kube-apiserver in {work} ...", flush=True)
    with LocalCluster(work / "kube") as cluster:
        webhook = WebhookProcess(work / "webhook", config=opts.config).start()
        try:
            docs = webhook_configurations(webhook.url, webhook.ca)
            kubectl(cluster, ADMIN, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
            kubectl(cluster, ADMIN, "create", "namespace", "demo")
            time.sleep(2)  # the API server picks up new webhook configurations in a moment
            for file in sorted(EXAMPLES.glob("*.yaml")) + sorted((EXAMPLES / "invalid").glob("*.yaml")):
                show(cluster, file)
            if opts.keep:
                print(f"\nkubeconfig: {cluster.kubeconfig(ADMIN)}  (Ctrl-C stops everything)")
                while True:
                    time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            webhook.stop()
    return 0


def show(cluster, file: Path) -> None:
    rel = file.relative_to(REPO_ROOT)
    out = kubectl(cluster, ADMIN, "apply", "-n", "demo", "-f", str(file))
    print(f"\n$ kubectl apply -f {rel}\n{(out.stdout + out.stderr).strip()}")
    if out.returncode:
        return
    name = yaml.safe_load(file.read_text())["metadata"]["name"]
    pod = json.loads(kubectl(cluster, ADMIN, "get", "pod", name, "-n", "demo", "-o", "json").stdout)
    print(f"  schedulerName: {pod['spec']['schedulerName']}")
    for c in pod["spec"]["containers"]:
        res = {k: v for k, v in c.get("resources", {}).get("limits", {}).items() if "mthreads" in k}
        print(f"  container {c['name']}: {res}")
    for k, v in sorted(pod["metadata"].get("annotations", {}).items()):
        if "mthreads" in k:
            print(f"  {k}: {v}")


if __name__ == "__main__":
    sys.exit(main())
