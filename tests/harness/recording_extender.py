"""A recording extender for kube-scheduler 1.20: which nodes passed kube-scheduler's own filters
for each pod (tests/scheduling/test_kube_scheduler_filters.py).

kube-scheduler calls an extender's filter verb after its own filters, with the names of the
nodes that passed them (`nodeCacheCapable: true`), and only when at least one did. This one
answers from a thread of the test process on 127.0.0.1: it records the names by pod uid and
lets through the node `choose` picks (by default all of them), so kube-scheduler binds the pod
itself. No prioritize, bind or preempt verb and no managedResources: it is asked about every pod
of its kube-scheduler's profile and changes nothing else.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import yaml

from tests.harness.extender import Process
from tests.harness.kube import free_ports

# (pod as kube-scheduler sent it, the nodes that passed its filters) -> the nodes let through
Choose = Callable[[dict, list[str]], list[str]]


def _all(pod: dict, names: list[str]) -> list[str]:
    return names


def _field(args: dict, name: str):
    """ExtenderArgs has no JSON tags in 1.20: kube-scheduler sends Go's field names ("Pod",
    "NodeNames"); read them as Go decodes, whatever the case."""
    for key, value in args.items():
        if key.lower() == name.lower():
            return value
    return None


class RecordingExtender:
    """`start()`, `url`, `filtered(uid)`, `stop()`. `choose` decides which of the nodes that
    passed are let through (kube-scheduler then picks among them)."""

    def __init__(self, choose: Choose | None = None):
        self.choose: Choose = choose or _all
        self._calls: dict[str, list[list[str]]] = {}
        self._lock = threading.Lock()
        self._called = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RecordingExtender:
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    if self.path.rstrip("/").rsplit("/", 1)[-1] != "filter":
                        raise ValueError(f"unexpected verb {self.path}")
                    answer = recorder._filter(json.loads(body))
                    code = 200
                except Exception as e:  # told to kube-scheduler and kept for the test
                    recorder.errors.append(f"{self.path}: {e!r}")
                    answer, code = {"Error": repr(e)}, 200
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="recording-extender",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _filter(self, args: dict) -> dict:
        pod = _field(args, "Pod") or {}
        names = list(_field(args, "NodeNames") or [])
        uid = pod["metadata"]["uid"]
        chosen = list(self.choose(pod, names))
        assert set(chosen) <= set(names), (chosen, names)
        with self._called:
            self._calls.setdefault(uid, []).append(names)
            self._called.notify_all()
        failed = {n: "not chosen by the recording extender" for n in names if n not in chosen}
        return {"NodeNames": chosen, "FailedNodes": failed, "Error": ""}

    def calls(self, uid: str) -> list[list[str]]:
        """Every filter call for the pod: the node names kube-scheduler sent, in order."""
        with self._lock:
            return [list(c) for c in self._calls.get(uid, ())]

    def forget(self, uid: str) -> None:
        with self._lock:
            self._calls.pop(uid, None)


def recording_scheduler_config(kubeconfig: Path, extender_url: str, healthz_port: int,
                               scheduler_name: str) -> dict:
    """A KubeSchedulerConfiguration (v1beta1, kube-scheduler 1.20): one profile,
    `scheduler_name`, with the default plugins; every node filtered
    (percentageOfNodesToScore 100); the recording extender's filter verb and nothing else."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 1000, "burst": 2000},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{healthz_port}",
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [{
            "urlPrefix": extender_url,
            "filterVerb": "filter",
            "enableHTTPS": False,
            "nodeCacheCapable": True,
            "ignorable": False,
            "httpTimeout": "10s",
        }],
    }


def start_recording_scheduler(cluster, workdir: Path, kubeconfig: Path, extender_url: str,
                              scheduler_name: str, verbosity: int = 2) -> Process:
    """kube-scheduler 1.20 with `recording_scheduler_config`, started (the caller waits for
    `healthy`; it is stopped by its PID with `stop()`)."""
    (port,) = free_ports(1)
    config = workdir / "kube-scheduler-recording.yaml"
    config.write_text(yaml.safe_dump(recording_scheduler_config(kubeconfig, extender_url, port,
                                                                scheduler_name)))
    return Process([str(cluster.kube_scheduler_path), f"--config={config}", "--secure-port=0",
                    f"--v={verbosity}"],
                   workdir / "kube-scheduler-recording.log",
                   f"http://127.0.0.1:{port}/healthz").start()
