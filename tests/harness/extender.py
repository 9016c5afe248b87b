"""kube-scheduler 1.20 + the extender as real processes against the test API server (for
tests/extender and bench/extender.py).

Everything listens on 127.0.0.1; each process is stopped by its own PID.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import yaml

from tests.harness.kube import free_ports
from tests.harness.process import LoggedProcess
from tests.harness.wait import wait_for

RESOURCES = ("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core")


def scheduler_config(kubeconfig: Path, extender_url: str, healthz_port: int,
                     node_sample: int = 0) -> dict:
    """A KubeSchedulerConfiguration (v1beta1, kube-scheduler 1.20) with one profile and
    the extender. In v1beta1 extenders are top-level: they serve every profile of this
    kube-scheduler, which is why it runs only the `hami-scheduler` profile.
    `node_sample`: percentageOfNodesToScore (0: kube-scheduler's adaptive sample, as the chart's
    default)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": node_sample,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{healthz_port}",
        "profiles": [{"schedulerName": "hami-scheduler"}],
        "extenders": [{
            "urlPrefix": extender_url,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            "bindVerb": "bind",
            "weight": 10,
            "enableHTTPS": False,
            "nodeCacheCapable": True,
            "httpTimeout": "10s",
            "managedResources": [{"name": r, "ignoredByScheduler": True} for r in RESOURCES],
        }],
    }


def _up(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=1).status == 200
    except OSError:
        return False


class Process(LoggedProcess):
    """A process of the stack, in its own session, healthy when `health_url` answers 200."""

    def __init__(self, args: list[str], log_path: Path, health_url: str):
        super().__init__(args, log_path, new_session=True)
        self.health_url = health_url

    def healthy(self) -> bool:
        if not self.running():
            raise AssertionError(f"{self.args[0]} exited:\n{self.tail()}")
        return _up(self.health_url)


EXTENDER = ("-m", "webhook.cli", "extender")


def start_extender(cluster, workdir: Path, extender_user: str, ready: bool = True,
                   program: tuple[str, ...] = EXTENDER) -> tuple[Process, str]:
    """The extender, started and (`ready`) ready: its first list done; and its URL.
    `program`: Python's arguments before the extender's own (another program that takes them:
    bench/floor_extender.py)."""
    (ext_port,) = free_ports(1)
    config = workdir / "config.yaml"
    config.write_text("devices:\n  mthreads:\n    memoryPerCard: [96, 160]\n")
    url = f"http://127.0.0.1:{ext_port}"
    extender = Process(
        [sys.executable, *program, "--config", str(config), "--kubeconfig",
         str(cluster.kubeconfig(extender_user)), "--bind", f"127.0.0.1:{ext_port}"],
        workdir / "extender.log", f"{url}/readyz").start()
    if ready:
        wait_until_ready(extender)
    return extender, url


def wait_until_ready(extender: Process) -> None:
    try:
        wait_for(extender.healthy, 60, what="extender /readyz")
    except BaseException:
        extender.stop()  # the caller gets no process to stop
        raise


def start_stack(cluster, workdir: Path, extender_user: str, admin_user: str, verbosity: int = 2,
                node_sample: int = 0, program: tuple[str, ...] = EXTENDER):
    """(extender, kube-scheduler), both started, the extender ready; the caller waits for
    kube-scheduler to be healthy.
    `verbosity`: kube-scheduler's --v (2 logs every binding; the bench uses 1);
    `node_sample`: as for scheduler_config; `program`: as for start_extender."""
    # Both at once, as the chart's two containers start: the extender listens before its
    # imports (webhook/base/listen.py), so kube-scheduler's first calls wait for it.
    extender, url = start_extender(cluster, workdir, extender_user, ready=False, program=program)
    (sched_port,) = free_ports(1)
    sched_config = workdir / "kube-scheduler.yaml"
    sched_config.write_text(yaml.safe_dump(scheduler_config(
        cluster.kubeconfig(admin_user), url, sched_port, node_sample)))
    scheduler = Process(
        [str(cluster.kube_scheduler_path), f"--config={sched_config}", "--secure-port=0",
         f"--v={verbosity}"],
        workdir / "kube-scheduler.log", f"http://127.0.0.1:{sched_port}/healthz").start()
    try:
        wait_until_ready(extender)
    except BaseException:
        scheduler.stop()
        raise
    return extender, scheduler
