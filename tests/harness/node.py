"""A real one-node cluster on this machine: etcd, kube-apiserver (the tests' LocalCluster, here
listening on a bridge this module makes), kube-controller-manager, kube-scheduler, kube-proxy,
containerd and a kubelet 1.20.2, with the fake device plugin reporting Mthreads cards.

All of it stays on the machine. The bridge `mtnode0` (10.250.0.1/24) is the node's address and
the pods' network; pods get addresses from it and a route to the Service range through it, and
no default route (nothing is NATed out). containerd has HTTP(S)_PROXY at a closed loopback
port, so any pull fails at once: every image is imported (hack/node-assets.sh makes pause and
kube-scheduler from the built binaries; the project's image comes from `make image`). Servers
listen on 127.0.0.1 or on the bridge's address.

Every process started here is stopped by its PID; stop() also undoes what the kubelet and
kube-proxy change on the host (sysctls, iptables chains, cgroups, mounts, the directories they
make) and removes the bridge, so nothing is left running or changed. One such cluster per
machine (the kubelet's device-plugin directory is fixed): a second one fails at start.

hack/node.py runs it from the command line.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import kubernetes.client as k
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.harness.kube import ADMIN, SA_ISSUER, USERS, LocalCluster, _cert, _write_key
from tests.harness.process import REPO_ROOT, log_tail
from tests.harness.wait import wait_for

NODE_ASSETS = REPO_ROOT / "hack" / "node-assets.sh"
NODE_NAME = "mthreads-node"
BRIDGE = "mtnode0"
BRIDGE_IP = "10.250.0.1"
POD_CIDR = "10.250.0.0/24"
SERVICE_CIDR = "10.96.0.0/24"
KUBERNETES_SERVICE_IP = "10.96.0.1"
CGROUP_ROOT = "mthreads-node"
LOCK_FILE = Path("/run/mthreads-node.lock")
DEVICE_PLUGIN_USER = "mthreads-device-plugin"  # the plugin's identity, in allocator.extraWriters
PAUSE_IMAGE = "registry.k8s.io/pause:3.2"
CLOSED_PROXY = "http://127.0.0.1:9"  # nothing listens there (checked): a pull fails at once

NODE_USER = f"system:node:{NODE_NAME}"
COMPONENT_USERS = {
    NODE_USER: ["system:nodes"],
    "system:kube-proxy": [],
    "system:kube-scheduler": [],
    "system:kube-controller-manager": ["system:masters"],  # its own credentials for every loop
    DEVICE_PLUGIN_USER: [],
}
# What the kubelet and kube-proxy change on the host, restored at stop.
SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward",
           "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
           "net/bridge/bridge-nf-call-ip6tables")
HOST_DIRS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd")
# Shared with other CNI users (podman's networks): removed when made here and left empty.
SHARED_DIRS = ("/var/lib/cni/results", "/var/lib/cni", "/etc/cni", "/opt/cni")


class NodeUnavailable(RuntimeError):
    """The machine cannot run the node (not root, another node cluster running...)."""


def run(*args: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {out.returncode}: {out.stderr.strip()}")
    return out


def node_assets() -> tuple[Path, Path]:
    """(the kube binaries' directory, the images' directory), built or installed on first use."""
    out = subprocess.run([str(NODE_ASSETS)], check=True, stdout=subprocess.PIPE, text=True,
                         timeout=3600).stdout
    found = dict(line.split("=", 1) for line in out.strip().splitlines()[-2:])
    return Path(found["KUBE"]), Path(found["IMAGES"])


def free_port(address: str) -> int:
    """A port below the ephemeral range that is free on `address` (client sockets take ports
    in the ephemeral range, where a server started a moment later can find its port taken)."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind((address, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on {address}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def write_node_pki(directory: Path) -> dict[str, Path]:
    """A CA, the API server's certificate for the bridge address, the `kubernetes` Service's
    address and names, and a service-account key pair."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (_cert("mthreads-node-ca", ca_key, ca_key.public_key())
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                              critical=True)
               .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"]
    sans = [x509.DNSName(n) for n in names] + [
        x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", BRIDGE_IP, KUBERNETES_SERVICE_IP)]
    server_cert = (_cert("kube-apiserver", ca_key, server_key.public_key(), ca_cert.subject)
                   .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .sign(ca_key, hashes.SHA256()))
    sa_key = ec.generate_private_key(ec.SECP256R1())
    paths = {n: directory / n for n in ("ca.crt", "apiserver.crt", "apiserver.key", "sa.key", "sa.pub")}
    paths["ca.crt"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["apiserver.crt"].write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(paths["apiserver.key"], server_key)
    _write_key(paths["sa.key"], sa_key)
    paths["sa.pub"].write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return paths


class NodeCluster(LocalCluster):
    """`NodeCluster(workdir).start()` ... `stop()`. Start and stop from one thread that lives as
    long as the cluster (the daemons get SIGTERM when the thread that started them ends).

    cards/units: the fake device plugin's cards (`device_plugin`), started once the node is Ready.
    """

    def __init__(self, workdir: str | Path, cards: int = 2, units: int = 96):
        super().__init__(workdir, start_timeout=120)
        self.cards, self.units = cards, units
        self._tokens.update({u: self._tokens.get(u) or os.urandom(24).hex() for u in COMPONENT_USERS})
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock_fd: int | None = None
        self._sysctls: dict[str, str] = {}
        self._made_dirs: list[str] = []
        self._made_shared: list[str] = []
        self._netns_before: set[str] = set()
        self._tables_before: set[str] = set()
        self._bridge_made = False
        self.images_dir: Path | None = None
        self.containerd_socket: Path | None = None
        self.device_plugin = None
        self.timings: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> NodeCluster:
        if os.geteuid() != 0:
            raise NodeUnavailable("the one-node cluster needs root (a bridge, iptables, cgroups, mounts)")
        self._lock()
        began = time.monotonic()
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.assets_dir, self.images_dir = node_assets()
            self.kube_scheduler_path = self.assets_dir / "kube-scheduler"
            self.timings["assets"] = time.monotonic() - began
            up = time.monotonic()
            self._record_host()
            self._bridge()
            self._control_plane()
            self._containerd()
            self._import(self.images_dir / "pause.tar", PAUSE_IMAGE)
            self._import(self.images_dir / "kube-scheduler.tar", "registry.k8s.io/kube-scheduler:v1.20.2")
            self._kubelet()
            self._kube_proxy()
            self._node_ready()
            self._start_device_plugin()
            self.timings["bring-up"] = time.monotonic() - up
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Everything down, in order, and the host as it was; safe to call more than once."""
        errors: list[str] = []

        def step(name, fn):
            try:
                fn()
            except Exception as e:  # go on: every later step still has to run
                errors.append(f"{name}: {e}")

        if self._apiserver is not None and "kubelet" in self._procs:
            step("pods", self._drain)
        if self.device_plugin is not None:
            step("device plugin", self.device_plugin.stop)
            self.device_plugin = None
        for name in ("kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager"):
            step(name, lambda n=name: self._stop_proc(n))
        step("containers", self._kill_leftover_containers)
        step("containerd", lambda: self._stop_proc("containerd"))
        step("shims", self._kill_shims)
        step("iptables", self._clean_iptables)
        step("mounts", self._unmount)
        step("netns", self._remove_netns)
        step("cni cache", self._remove_cni_cache)
        step("cgroups", self._remove_cgroups)
        step("bridge", self._remove_bridge)
        step("sysctls", self._restore_sysctls)
        step("directories", self._remove_dirs)
        super().stop()  # kube-apiserver, etcd
        self._unlock()
        if errors:
            raise RuntimeError("the node did not stop cleanly: " + "; ".join(errors))

    # -- clients -------------------------------------------------------------------------------

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return run("ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args,
                   timeout=timeout, check=check)

    def images(self) -> set[str]:
        return set(self.ctr("images", "ls", "-q").stdout.split())

    def import_image(self, archive: Path, name: str, source: str) -> None:
        """Import an image archive (OCI or docker-archive) that holds `source`, tagged `name`."""
        self._import(archive, name, source)

    def log(self, name: str, lines: int = 40) -> str:
        return log_tail(self.workdir / f"{name}.log", lines)

    # -- host state ----------------------------------------------------------------------------

    def _lock(self) -> None:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise NodeUnavailable(f"another one-node cluster runs on this machine ({LOCK_FILE} is held)")
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _record_host(self) -> None:
        for key in SYSCTLS:
            value = _read(Path("/proc/sys") / key)
            if value is not None:
                self._sysctls[key] = value
        self._made_dirs = [d for d in HOST_DIRS if not os.path.lexists(d)]
        self._made_shared = [d for d in SHARED_DIRS if not os.path.lexists(d)]
        self._netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        self._tables_before = self._nft_tables()
        if os.path.exists("/var/lib/kubelet/device-plugins/kubelet.sock"):
            # a kubelet of a run that was killed left it; ours replaces it
            os.unlink("/var/lib/kubelet/device-plugins/kubelet.sock")

    def _restore_sysctls(self) -> None:
        for key, value in self._sysctls.items():
            path = Path("/proc/sys") / key
            if _read(path) != value:
                path.write_text(value + "\n")
        self._sysctls = {}

    def _remove_cni_cache(self) -> None:
        """libcni's cache of our sandboxes' networks, left when a sandbox was not torn down
        (a pod still there at stop): our network's entries and the loopback ones of the same ids."""
        results = Path("/var/lib/cni/results")
        if not results.is_dir():
            return
        for entry in results.glob("mthreads-node-*-eth0"):
            sandbox = entry.name[len("mthreads-node-"):-len("-eth0")]
            entry.unlink(missing_ok=True)
            (results / f"cni-loopback-{sandbox}-lo").unlink(missing_ok=True)

    def _remove_dirs(self) -> None:
        for d in self._made_dirs:
            shutil.rmtree(d, ignore_errors=True)
            if os.path.lexists(d):
                raise RuntimeError(f"could not remove {d}")
        self._made_dirs = []
        for d in self._made_shared:  # in order: /var/lib/cni/results before /var/lib/cni
            for sub in sorted((p for p in Path(d).rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                              reverse=True) if os.path.isdir(d) else ():
                try:
                    sub.rmdir()  # empty ones only: another CNI user's files stay
                except OSError:
                    pass
            try:
                os.rmdir(d)
            except OSError:
                pass
        self._made_shared = []

    # -- network -------------------------------------------------------------------------------

    def _bridge(self) -> None:
        if Path(f"/sys/class/net/{BRIDGE}").exists():  # left by a run that was killed
            run("ip", "link", "del", BRIDGE)
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        self._bridge_made = True
        run("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        # The Service range through the bridge: reached on the machine only, never routed out.
        run("ip", "route", "add", SERVICE_CIDR, "dev", BRIDGE, "src", BRIDGE_IP)
        # Forwarding on the bridge alone (a pod reaching another through a Service).
        Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding").write_text("1\n")
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        (cni / "net.d" / "10-mthreads-node.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": "mthreads-node",
            "plugins": [{
                "type": "bridge", "bridge": BRIDGE, "isGateway": False, "isDefaultGateway": False,
                "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "dataDir": str(cni / "ipam"),
                         "ranges": [[{"subnet": POD_CIDR, "rangeStart": "10.250.0.10"}]],
                         # the Services and the node, and nothing else: no default route
                         "routes": [{"dst": SERVICE_CIDR, "gw": BRIDGE_IP}]},
            }]}, indent=1))
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("# no cluster DNS on this node, and no name server: pods use addresses\n"
                          "options ndots:0\n")

    def _remove_bridge(self) -> None:
        if self._bridge_made and Path(f"/sys/class/net/{BRIDGE}").exists():
            run("ip", "link", "del", BRIDGE)  # its address and route go with it
        self._bridge_made = False

    def _remove_netns(self) -> None:
        if not os.path.isdir("/run/netns"):
            return
        for name in set(os.listdir("/run/netns")) - self._netns_before:
            if name.startswith("cni-"):
                subprocess.run(["umount", f"/run/netns/{name}"], capture_output=True, timeout=30)
                os.unlink(f"/run/netns/{name}")

    def _nft_tables(self) -> set[str]:
        out = run("nft", "list", "tables", check=False)
        return set(out.stdout.strip().splitlines()) if out.returncode == 0 else set()

    def _clean_iptables(self) -> None:
        """The KUBE-* chains (the kubelet's and kube-proxy's) and every rule jumping to them; the
        (iptables-nft) tables that did not exist before, once empty."""
        self._clean_kube_chains()
        for line in sorted(self._nft_tables() - self._tables_before):
            family, table = line.split()[1:3]  # "table ip nat"
            tool = {"ip": "iptables", "ip6": "ip6tables"}.get(family)
            if tool is None or table not in ("filter", "nat", "mangle"):
                continue
            rules = run(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            if all(r.startswith("-P ") and r.endswith(" ACCEPT") for r in rules):
                run("nft", "delete", "table", family, table, check=False)

    def _clean_kube_chains(self) -> None:
        for tool in ("iptables", "ip6tables"):
            if shutil.which(tool) is None:
                continue
            for table in ("filter", "nat", "mangle"):
                out = run(tool, "-w", "-t", table, "-S", check=False)
                if out.returncode != 0:
                    continue
                chains = [line.split()[1] for line in out.stdout.splitlines()
                          if line.startswith("-N KUBE-")]
                for line in out.stdout.splitlines():
                    parts = shlex.split(line)  # comments are quoted
                    if parts[:1] == ["-A"] and not parts[1].startswith("KUBE-") and \
                            any(p.startswith("KUBE-") for p in parts[2:]):
                        run(tool, "-w", "-t", table, "-D", *parts[1:], check=False)
                for chain in chains:
                    run(tool, "-w", "-t", table, "-F", chain, check=False)
                for chain in chains:
                    run(tool, "-w", "-t", table, "-X", chain, check=False)

    # -- processes -----------------------------------------------------------------------------

    def _start_proc(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        command = ["setpriv", "--pdeathsig", "TERM", "--", *args]
        with open(self.workdir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=env)
        self._procs[name] = proc
        return proc

    def _stop_proc(self, name: str, timeout: float = 20) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    def _alive(self, *names: str) -> None:
        for name in names:
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}:\n{self.log(name)}")

    # -- control plane -------------------------------------------------------------------------

    def _control_plane(self) -> None:
        pki = write_node_pki(self.workdir)
        self.ca_file = pki["ca.crt"]
        etcd_port, peer_port = free_port("127.0.0.1"), free_port("127.0.0.1")
        api_port = free_port(BRIDGE_IP)
        self.url = f"https://{BRIDGE_IP}:{api_port}"
        self._etcd = self._spawn("etcd", self._etcd_args(etcd_port, peer_port))
        tokens = self.workdir / "tokens.csv"
        groups = {**USERS, **COMPONENT_USERS}
        tokens.write_text("".join(
            f"{self._tokens[u]},{u},{u}" + (f',"{",".join(g)}"' if g else "") + "\n" for u, g in groups.items()))
        tokens.chmod(0o600)
        self._apiserver_args = [
            str(self.assets_dir / "kube-apiserver"),
            f"--bind-address={BRIDGE_IP}", f"--advertise-address={BRIDGE_IP}", f"--secure-port={api_port}",
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={self.workdir}",
            f"--tls-cert-file={pki['apiserver.crt']}", f"--tls-private-key-file={pki['apiserver.key']}",
            f"--client-ca-file={pki['ca.crt']}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--feature-gates=EphemeralContainers=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-node-port-range=30000-30999",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki['sa.pub']}",
            f"--service-account-signing-key-file={pki['sa.key']}",
            "--v=1",
        ]
        self._start_apiserver()
        common = ["--v=1"]
        self._start_proc("kube-controller-manager", [
            str(self.assets_dir / "kube-controller-manager"),
            f"--kubeconfig={self.kubeconfig('system:kube-controller-manager')}",
            "--port=0", "--secure-port=0", "--leader-elect=false",
            f"--service-account-private-key-file={pki['sa.key']}", f"--root-ca-file={pki['ca.crt']}",
            "--use-service-account-credentials=false",
            "--controllers=*,-bootstrapsigner,-tokencleaner,-csrsigning,-csrapproving,-csrcleaner,"
            "-nodeipam,-cloud-node-lifecycle,-route,-service,-attachdetach,-persistentvolume-expander",
            *common])
        self._start_proc("kube-scheduler", [
            str(self.assets_dir / "kube-scheduler"),
            f"--kubeconfig={self.kubeconfig('system:kube-scheduler')}",
            "--port=0", "--secure-port=0", "--leader-elect=false", *common])
        admin = self.api_client(ADMIN)
        rbac = k.RbacAuthorizationV1Api(admin)
        role = {"metadata": {"name": "mthreads-device-plugin"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]}]}
        rbac.create_cluster_role(role)
        rbac.create_cluster_role_binding({
            "metadata": {"name": "mthreads-device-plugin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mthreads-device-plugin"},
            "subjects": [{"kind": "User", "name": DEVICE_PLUGIN_USER}]})
        # The default ServiceAccount of kube-system exists once the controller-manager runs.
        wait_for(lambda: self._has_default_sa(admin), 60, 0.3, what="the controller-manager's service accounts",
                 alive=self._procs["kube-controller-manager"])

    def _has_default_sa(self, admin) -> bool:
        try:
            k.CoreV1Api(admin).read_namespaced_service_account("default", "kube-system")
            return True
        except k.ApiException as e:
            if e.status == 404:
                return False
            raise

    # -- containerd ----------------------------------------------------------------------------

    def _containerd(self) -> None:
        with socket.socket() as s:  # the proxy that fails every pull must be a closed port
            if s.connect_ex(("127.0.0.1", 9)) == 0:
                raise NodeUnavailable("something listens on 127.0.0.1:9, the closed port containerd's proxy points at")
        base = self.workdir / "containerd"
        base.mkdir(exist_ok=True)
        self.containerd_socket = base / "containerd.sock"
        config = base / "config.toml"
        config.write_text(f"""version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
oom_score = 0
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # no CAP_SYS_RESOURCE here: without it every sandbox fails ("can't get final child's PID")
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{self.workdir / 'cni' / 'net.d'}"
""")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HTTP_PROXY": CLOSED_PROXY, "HTTPS_PROXY": CLOSED_PROXY,
               "http_proxy": CLOSED_PROXY, "https_proxy": CLOSED_PROXY, "NO_PROXY": "", "no_proxy": ""}
        proc = self._start_proc("containerd", ["containerd", "--config", str(config)], env=env)
        wait_for(lambda: self.ctr("version", timeout=10).returncode == 0, 60, 0.2, what="containerd",
                 alive=proc, retry_on=(RuntimeError,))

    def _import(self, archive: Path, name: str, source: str | None = None) -> None:
        self.ctr("images", "import", "--all-platforms", str(archive), timeout=600)
        if name not in self.images():
            if source is None or source not in self.images():
                raise RuntimeError(f"importing {archive} gave neither {name} nor {source}: {sorted(self.images())}")
            self.ctr("images", "tag", "--force", source, name)
        if name not in self.images():
            raise RuntimeError(f"{name} is not in containerd after importing {archive}")

    def _kill_leftover_containers(self) -> None:
        """Tasks the kubelet did not stop (a pod still there at stop): killed through containerd."""
        if self.containerd_socket is None or "containerd" not in self._procs:
            return
        tasks = self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, check=False, timeout=30)
        for task in tasks:
            self.ctr("tasks", "delete", "-f", task, check=False, timeout=30)
        for container in self.ctr("containers", "ls", "-q", check=False, timeout=30).stdout.split():
            self.ctr("containers", "delete", container, check=False, timeout=30)

    def _kill_shims(self) -> None:
        """containerd's shims outlive it: each of ours (its -address names our socket) by PID."""
        if self.containerd_socket is None:
            return
        needle = str(self.containerd_socket).encode()
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and needle in cmdline:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _unmount(self) -> None:
        roots = [str(self.workdir), "/var/lib/kubelet", "/run/containerd"]
        for _ in range(3):
            points = []
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if any(point == r or point.startswith(r + "/") for r in roots):
                    points.append(point)
            if not points:
                return
            for point in sorted(points, key=len, reverse=True):
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)

    # -- kubelet, kube-proxy -------------------------------------------------------------------

    def _cgroups(self, unified: bool = False) -> list[Path]:
        """The cgroup v1 hierarchies (and the v2 one of a hybrid host, where runc makes ours too)."""
        roots = []
        for d in Path("/sys/fs/cgroup").iterdir():
            if (d.name == "unified" and not unified) or not (d / "cgroup.procs").exists():
                continue
            roots.append(d)
        return roots

    def _kubelet(self) -> None:
        for root in self._cgroups():
            mine = root / CGROUP_ROOT
            mine.mkdir(exist_ok=True)
            if root.name == "cpuset":
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (mine / f).write_text((root / f).read_text())
        self.kubelet_port = free_port(BRIDGE_IP)
        self.kubelet_healthz = free_port("127.0.0.1")
        config = self.workdir / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": BRIDGE_IP, "port": self.kubelet_port, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": self.kubelet_healthz,
            # only clients with a certificate of the cluster's CA (none here: no `kubectl logs`)
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.ca_file)}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}", "cgroupsPerQOS": True,
            "failSwapOn": False, "maxPods": 250, "resolvConf": str(self.workdir / "resolv.conf"),
            "clusterDomain": "cluster.local", "clusterDNS": [],
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "10s",
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                             "imagefs.available": "1%"},
            "makeIPTablesUtilChains": False, "serializeImagePulls": False,
            "containerLogMaxSize": "1Mi", "containerLogMaxFiles": 2,
        }))
        self._start_proc("kubelet", [
            str(self.assets_dir / "kubelet"),
            f"--config={config}", f"--kubeconfig={self.kubeconfig(NODE_USER)}",
            "--container-runtime=remote",
            f"--container-runtime-endpoint=unix://{self.containerd_socket}",
            f"--root-dir={self.workdir / 'kubelet'}", f"--cert-dir={self.workdir / 'kubelet-pki'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={BRIDGE_IP}",
            f"--pod-infra-container-image={PAUSE_IMAGE}",
            "--node-labels=mthreads.com/node-tests=true", "--v=1"])

    def _kube_proxy(self) -> None:
        self._start_proc("kube-proxy", [
            str(self.assets_dir / "kube-proxy"),
            f"--kubeconfig={self.kubeconfig('system:kube-proxy')}",
            f"--hostname-override={NODE_NAME}", "--proxy-mode=iptables", f"--cluster-cidr={POD_CIDR}",
            f"--nodeport-addresses={BRIDGE_IP}/32",
            f"--metrics-bind-address=127.0.0.1:{free_port('127.0.0.1')}",
            f"--healthz-bind-address=127.0.0.1:{free_port('127.0.0.1')}",
            # leave the host's conntrack settings as they are
            "--conntrack-max-per-core=0", "--conntrack-min=0",
            "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
            "--v=1"])

    def _node_ready(self) -> None:
        core = k.CoreV1Api(self.api_client(ADMIN))

        def ready():
            self._alive("kubelet", "containerd", "kube-proxy", "kube-controller-manager", "kube-scheduler")
            try:
                node = core.read_node(NODE_NAME)
            except k.ApiException as e:
                if e.status == 404:
                    return None
                raise
            conditions = {c.type: c.status for c in node.status.conditions or []}
            taints = [t.key for t in node.spec.taints or []]
            return conditions.get("Ready") == "True" and not taints

        wait_for(ready, 120, 0.5, what=lambda: f"node {NODE_NAME} Ready and untainted:\n{self.log('kubelet', 15)}")

    def _start_device_plugin(self) -> None:
        from tests.harness.device_plugin import FakeDevicePlugin
        self.device_plugin = FakeDevicePlugin(
            self.api_client(DEVICE_PLUGIN_USER), NODE_NAME, self.cards, self.units,
            self.assets_dir, self.workdir / "device-plugin").start()
        core = k.CoreV1Api(self.api_client(ADMIN))
        expected = self.device_plugin.capacity()

        def reported():
            self._alive("kubelet")
            alloc = core.read_node(NODE_NAME).status.allocatable or {}
            return all(alloc.get(r) == v for r, v in expected.items())

        wait_for(reported, 60, 0.3, what=lambda: f"the node reporting {expected}:\n{self.log('kubelet', 15)}")

    # -- stop ----------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Every pod deleted and gone from the node, so the kubelet tears down their sandboxes
        (network, mounts, cgroups) itself."""
        core = k.CoreV1Api(self.api_client(ADMIN))
        for ns in core.list_namespace().items:
            core.delete_collection_namespaced_pod(ns.metadata.name, grace_period_seconds=0)

        def gone():
            self._alive("kubelet")
            if core.list_pod_for_all_namespaces().items:
                for ns in core.list_namespace().items:  # controllers may have made new ones
                    core.delete_collection_namespaced_pod(ns.metadata.name, grace_period_seconds=0)
                return False
            return not self.ctr("tasks", "ls", "-q", check=False, timeout=30).stdout.split()

        # Deployments would make new pods: scale what controllers run to nothing first.
        apps = k.AppsV1Api(self.api_client(ADMIN))

        def gone_already(delete, *args):  # the garbage collector may be there first
            try:
                delete(*args, propagation_policy="Background")
            except k.ApiException as e:
                if e.status != 404:
                    raise

        for d in apps.list_deployment_for_all_namespaces().items:
            gone_already(apps.delete_namespaced_deployment, d.metadata.name, d.metadata.namespace)
        for rs in apps.list_replica_set_for_all_namespaces().items:
            gone_already(apps.delete_namespaced_replica_set, rs.metadata.name, rs.metadata.namespace)
        wait_for(gone, 90, 0.5, what="every pod and container gone from the node")

    def _remove_cgroups(self) -> None:
        for root in self._cgroups(unified=True):
            mine = root / CGROUP_ROOT
            if not mine.exists():
                continue
            for _ in range(20):
                dirs = sorted((p for p in mine.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
                for d in [*dirs, mine]:
                    for pid in _read(d / "cgroup.procs").split() if (d / "cgroup.procs").exists() else ():
                        try:
                            os.kill(int(pid), signal.SIGKILL)  # a container process left in our cgroups
                        except (ProcessLookupError, ValueError):
                            pass
                    try:
                        d.rmdir()
                    except OSError:
                        pass
                if not mine.exists():
                    break
                time.sleep(0.2)
            if mine.exists():
                raise RuntimeError(f"could not remove the cgroup {mine}")


def node_of(api_client) -> dict:
    resp = k.CoreV1Api(api_client).read_node(NODE_NAME, _preload_content=False)
    return json.loads(resp.data)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S")
