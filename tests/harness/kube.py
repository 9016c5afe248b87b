"""A real etcd + kube-apiserver on loopback for the tests, no mocks.

There is no kubelet, scheduler or controller-manager: pods stay Pending until something binds
them, namespaces never finish terminating, and nodes are whatever the tests write (see
make_fake_node). Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import json
import re
import secrets
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes.client
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.harness.process import log_tail, stop_process
from tests.harness.wait import wait_for
from webhook.scheduling.pod_status import scheduled_condition

REPO_ROOT = Path(__file__).resolve().parents[2]
ASSETS_SCRIPT = REPO_ROOT / "hack" / "kube-assets.sh"

ADMIN = "admin"
ALICE = "alice"
ALLOCATOR = "system:serviceaccount:kube-system:mthreads-allocator"
# The API server adds system:authenticated to every one of them by itself.
USERS = {
    ADMIN: ["system:masters"],
    ALICE: [],
    ALLOCATOR: ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
}

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
CORES_PER_CARD = 16


def find_assets() -> Path:
    """Directory with kube-apiserver, kube-scheduler and etcd (built on first use)."""
    out = subprocess.run(
        [str(ASSETS_SCRIPT)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (the sockets stay open until all are picked)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _write_key(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _cert(subject: str, issuer_key, public_key, issuer: x509.Name | None = None):
    """A one-day certificate builder; issuer None means self-signed."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def write_pki(directory: Path) -> dict[str, Path]:
    """A fresh CA, an apiserver serving cert for 127.0.0.1/localhost, a service-account key pair."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        _cert("mthreads-test-ca", ca_key, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_cert = (
        _cert("kube-apiserver", ca_key, server_key.public_key(), ca_cert.subject)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())

    paths = {
        name: directory / name
        for name in ("ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")
    }
    paths["ca.crt"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["apiserver.crt"].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths["apiserver.key"], server_key)
    _write_key(paths["sa.key"], sa_key)
    paths["sa.pub"].write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths


class LocalCluster:
    """etcd + kube-apiserver in `workdir` (data, certificates, kubeconfigs and logs live there).

    Use `LocalCluster(workdir).start()` and `stop()`, or `with LocalCluster(workdir) as c:`.
    Call start() and restart_apiserver() from a thread that lives as long as the cluster (the
    main thread under pytest): the servers get SIGTERM when the thread that started them ends.
    """

    def __init__(self, workdir: str | Path, start_timeout: float = 60.0):
        self.workdir = Path(workdir)
        self.start_timeout = start_timeout
        self.assets_dir: Path | None = None
        self.kube_scheduler_path: Path | None = None
        self.url = ""
        self.ca_file: Path | None = None
        self._tokens = {user: secrets.token_urlsafe(32) for user in USERS}
        self._etcd: subprocess.Popen | None = None
        self._apiserver: subprocess.Popen | None = None
        self._apiserver_args: list[str] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.assets_dir = find_assets()
        self.kube_scheduler_path = self.assets_dir / "kube-scheduler"
        pki = write_pki(self.workdir)
        self.ca_file = pki["ca.crt"]
        etcd_port, peer_port, api_port = free_ports(3)
        self.url = f"https://127.0.0.1:{api_port}"
        atexit.register(self.stop)
        # The API server retries etcd until it answers, so both start at once.
        self._etcd = self._spawn("etcd", self._etcd_args(etcd_port, peer_port))
        self._apiserver_args = self._apiserver_command(pki, api_port, etcd_port)
        self._start_apiserver()
        return self

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd; safe to call more than once."""
        for attr in ("_apiserver", "_etcd"):
            proc = getattr(self, attr)
            if proc is not None:
                stop_process(proc)
                setattr(self, attr, None)
        atexit.unregister(self.stop)

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver only; same port, same etcd (so the data survives)."""
        if self._etcd is None:
            raise RuntimeError("the cluster is not running")
        stop_process(self._apiserver)
        self._start_apiserver()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients -------------------------------------------------------------------------------

    def token(self, user: str) -> str:
        return self._tokens[user]

    def kubeconfig(self, user: str) -> Path:
        """A kubeconfig file that authenticates as `user` with its bearer token."""
        path = self.workdir / f"kubeconfig-{re.sub(r'[^A-Za-z0-9_.-]', '_', user)}.yaml"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"token": self.token(user)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def api_client(self, user: str) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration(host=self.url)
        config.ssl_ca_cert = str(self.ca_file)
        config.api_key = {"authorization": self.token(user)}
        config.api_key_prefix = {"authorization": "Bearer"}
        return kubernetes.client.ApiClient(config)

    # -- internals -----------------------------------------------------------------------------

    def _etcd_args(self, client_port: int, peer_port: int) -> list[str]:
        client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        return [
            str(self.assets_dir / "etcd"),
            "--name=local",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            "--logger=zap",
        ]

    def _apiserver_command(self, pki: dict[str, Path], port: int, etcd_port: int) -> list[str]:
        tokens = self.workdir / "tokens.csv"
        # token,user,uid[,"group,..."]: an empty group column would add a group named "".
        tokens.write_text(
            "".join(
                f"{self._tokens[user]},{user},{user}" + (f',"{",".join(groups)}"' if groups else "") + "\n"
                for user, groups in USERS.items()
            )
        )
        tokens.chmod(0o600)
        return [
            str(self.assets_dir / "kube-apiserver"),
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            # The reconciler would write the advertised address (the bind address) into the
            # `kubernetes` Endpoints, which validation refuses for loopback; nothing needs them.
            "--endpoint-reconciler-type=none",
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={self.workdir}",
            f"--tls-cert-file={pki['apiserver.crt']}",
            f"--tls-private-key-file={pki['apiserver.key']}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=Node,RBAC",
            # No controller-manager creates the default service accounts it would insist on.
            "--disable-admission-plugins=ServiceAccount",
            # Let privileged pods reach the webhook, which is the one that must refuse them.
            "--allow-privileged=true",
            "--feature-gates=EphemeralContainers=true",  # pods/ephemeralcontainers (alpha in 1.20)
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # A webhook's `service:` reference is dialled at the Service's endpoint address
            # (no kube-proxy here): tests/chart serves the chart's Service from a netns.
            "--enable-aggregator-routing=true",
            # Required since 1.20, although nothing here uses service-account tokens.
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--v=2",
        ]

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        # atexit does not run when the test process is killed (a CI timeout): the kernel then
        # sends SIGTERM itself (parent-death signal; it fires when the *thread* that started
        # the process ends, so start and restart from a thread that outlives the cluster).
        command = ["setpriv", "--pdeathsig", "TERM", "--", *args]
        with open(self.workdir / f"{name}.log", "ab") as log:
            # Own session: a Ctrl-C reaches pytest only, which then stops us in order.
            return subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _start_apiserver(self) -> None:
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_args)
        self._wait_ready()

    def _wait_ready(self) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.token(ADMIN)}"}
        )

        def ready() -> bool:
            for name, proc in (("etcd", self._etcd), ("kube-apiserver", self._apiserver)):
                if proc.poll() is not None:
                    self._fail(f"{name} exited with code {proc.returncode}")
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return response.status == 200

        try:  # not listening yet, or not ready (HTTP 500): tried again
            wait_for(ready, self.start_timeout, 0.1, what=f"kube-apiserver ready at {self.url}/readyz",
                     retry_on=(urllib.error.URLError, OSError))
        except AssertionError as e:
            self._fail(str(e))

    def _fail(self, reason: str) -> None:
        logs = "\n".join(
            f"--- {name}.log (tail) ---\n{log_tail(self.workdir / f'{name}.log')}"
            for name in ("etcd", "kube-apiserver")
        )
        self.stop()
        raise RuntimeError(f"{reason}\n{logs}")


# -- fake nodes --------------------------------------------------------------------------------


def _ready_condition(ready: bool) -> dict:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "fake node written by the tests",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def make_fake_node(
    api_client: kubernetes.client.ApiClient,
    name: str,
    cards: int,
    units_per_card: int,
    ready: bool = True,
    *,
    cpu: str = "32",
    memory: str = "128Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict] | None = None,
) -> kubernetes.client.V1Node:
    """Create a Node with `cards` Mthreads cards of `units_per_card` memory units each.

    A create may carry a status, but an update or patch of the node itself keeps the stored
    status (as for every object with a status subresource), so the status is written through
    the `status` subresource, which is also how tests change it later (see set_node_ready).
    """
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_node(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints or []},
        }
    )
    resources = {
        "cpu": cpu,
        "memory": memory,
        "pods": "110",
        "mthreads.com/sgpu-core": str(CORES_PER_CARD * cards),
        "mthreads.com/sgpu-memory": str(units_per_card * cards),
    }
    # The NodeTaint admission plugin adds node.kubernetes.io/not-ready at creation; with no
    # controller-manager here, take it off as the node lifecycle controller would.
    core.patch_node(name, {"spec": {"taints": taints or None}})
    status = {"capacity": resources, "allocatable": resources, "conditions": [_ready_condition(ready)]}
    return core.patch_node_status(name, {"status": status})


def set_node_ready(
    api_client: kubernetes.client.ApiClient, name: str, ready: bool
) -> kubernetes.client.V1Node:
    """Flip a fake node's Ready condition (a merge patch replaces the conditions list)."""
    core = kubernetes.client.CoreV1Api(api_client)
    return core.patch_node_status(name, {"status": {"conditions": [_ready_condition(ready)]}})


def set_node_resources(api_client: kubernetes.client.ApiClient, name: str, capacity: dict | None = None,
                       allocatable: dict | None = None) -> kubernetes.client.V1Node:
    """Change a fake node's capacity and allocatable as a device plugin's kubelet would (a merge
    patch of the status: keys given are set, a None value removes the key)."""
    status = {k: v for k, v in (("capacity", capacity), ("allocatable", allocatable)) if v is not None}
    return kubernetes.client.CoreV1Api(api_client).patch_node_status(name, {"status": status})


def read_node(api_client: kubernetes.client.ApiClient, name: str) -> dict:
    """A node as plain JSON (for the invariant checker)."""
    resp = kubernetes.client.CoreV1Api(api_client).read_node(name, _preload_content=False)
    return json.loads(resp.data)


def mthreads_resources(cards: int, units: int, count: int | None = None) -> dict:
    """The Mthreads resources of `cards` cards of `units` units (and the count resource, when
    a device plugin lists it)."""
    out = {"mthreads.com/sgpu-core": str(CORES_PER_CARD * cards),
           "mthreads.com/sgpu-memory": str(units * cards)}
    if count is not None:
        out["mthreads.com/vgpu"] = str(count)
    return out


def end_pod(api_client: kubernetes.client.ApiClient, namespace: str, name: str,
            phase: str = "Succeeded") -> None:
    """Write a pod's end as its kubelet does: the status subresource, with the phase and the
    containers' terminated states."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    core = kubernetes.client.CoreV1Api(api_client)
    pod = core.read_namespaced_pod(name, namespace)
    code = 0 if phase == "Succeeded" else 1
    statuses = [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                          "startedAt": now, "finishedAt": now}}}
                for c in pod.spec.containers]
    core.patch_namespaced_pod_status(name, namespace, {"status": {
        "phase": phase, "containerStatuses": statuses,
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}]}})


class FakeFleet:
    """Fake nodes for one test, named `<tag>-<n>`; `delete()` removes them afterwards."""

    def __init__(self, api_client: kubernetes.client.ApiClient, tag: str,
                 labels: dict[str, str] | None = None):
        self.api_client, self.tag, self.labels = api_client, tag, labels or {}
        self.made: list[str] = []

    def __call__(self, cards: int, units: int, count: int = 1, **kw) -> list[str]:
        names = []
        for _ in range(count):
            name = f"{self.tag}-{len(self.made)}"
            labels = {**self.labels, **(kw.pop("labels", None) or {})}
            make_fake_node(self.api_client, name, cards, units, labels=labels, **kw)
            self.made.append(name)
            names.append(name)
        return names

    def delete(self) -> None:
        core = kubernetes.client.CoreV1Api(self.api_client)
        for name in self.made:
            try:
                core.delete_node(name)
            except kubernetes.client.ApiException:
                pass


def ensure_namespace(api_client, name: str) -> None:
    try:
        kubernetes.client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    except kubernetes.client.ApiException as e:
        if e.status != 409:
            raise


def read_pod(api_client, namespace: str, name: str) -> dict:
    """A pod as plain JSON (no typed models)."""
    resp = kubernetes.client.CoreV1Api(api_client).read_namespaced_pod(name, namespace,
                                                                       _preload_content=False)
    return json.loads(resp.data)


def bound_pod(api_client, namespace: str, name: str) -> dict | None:
    """The pod once a scheduler has bound it, else None (a check for wait_for)."""
    p = read_pod(api_client, namespace, name)
    return p if p["spec"].get("nodeName") else None


def unschedulable_condition(pod: dict) -> dict | None:
    """The pod's PodScheduled=False condition once a scheduler has written one, else None."""
    c = scheduled_condition(pod)
    return c if c is not None and c.get("status") == "False" else None


def refused(api_client, namespace: str, name: str) -> dict | None:
    """unschedulable_condition of the pod as the API server holds it now."""
    return unschedulable_condition(read_pod(api_client, namespace, name))


def list_pods(api_client, namespace: str) -> list[dict]:
    """The namespace's pods as plain JSON (no typed models)."""
    resp = kubernetes.client.CoreV1Api(api_client).list_namespaced_pod(namespace, _preload_content=False)
    return json.loads(resp.data)["items"]


def warning_events(api_client, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the Warning events about the object `name` in `namespace` (a
    node's are in `default`)."""
    resp = kubernetes.client.CoreV1Api(api_client).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},type=Warning",
        _preload_content=False)
    return [(e["reason"], e["message"]) for e in json.loads(resp.data)["items"]]
