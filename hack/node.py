"""Bring up a real one-node cluster on this machine, and tear it down (root; tests/harness/node.py).

  hack/node.py            up, with the fake device plugin's cards; prints an admin kubeconfig
                          and waits; Ctrl-C (or SIGTERM) tears everything down
  hack/node.py --check    up, the times printed, and down again (what tests/node does once)
  hack/node.py --cards 4 --units 160

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, the kubelet 1.20.2
and kube-proxy, on a bridge of its own (10.250.0.1/24: no default route for the pods, nothing
NATed out; containerd cannot pull: import images with `ctr`, see tests/node). The first run
builds the node's binaries (hack/kube-assets.sh) and installs containerd, runc, the CNI plugins
and iptables (hack/node-assets.sh). Nothing is left running or changed on the host afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.kube import ADMIN  # noqa: E402
from tests.harness.node import NODE_NAME, NodeCluster, NodeUnavailable  # noqa: E402


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--check", action="store_true", help="bring it up, print the times, tear it down")
    args.add_argument("--cards", type=int, default=2, help="the fake device plugin's cards (default 2)")
    args.add_argument("--units", type=int, default=96, help="memory units per card (96: MTT S4000, 160: MTT S5000)")
    opts = args.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mthreads-node-"))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"bringing up the one-node cluster in {work} ...", flush=True)
    cluster = NodeCluster(work / "kube", cards=opts.cards, units=opts.units)
    try:
        cluster.start()
    except NodeUnavailable as e:
        print(f"node: {e}", file=sys.stderr)
        return 1
    try:
        t = cluster.timings
        print(f"node {NODE_NAME} Ready with {opts.cards} cards of {opts.units} units: "
              f"assets {t['assets']:.1f} s, bring-up {t['bring-up']:.1f} s", flush=True)
        if not opts.check:
            print(f"kubeconfig: {cluster.kubeconfig(ADMIN)}\nCtrl-C stops it.", flush=True)
            try:
                done.wait()
            except KeyboardInterrupt:
                pass
    finally:
        print("tearing down ...", flush=True)
        cluster.stop()  # raises when something could not be undone: the logs stay then
        shutil.rmtree(work)
        print("down; the host is as it was.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
