"""The client settings of the common kubeconfigs and of the in-cluster config, read without the
kubernetes package (api.py's fast path).

`import kubernetes` took 0.22 s of the extender's 0.38 s of imports, and the package served only
to read these settings at start. So the common cases are read here, to the same values its
loader (kubernetes 37: config/kube_config.py, config/incluster_config.py) puts in a
`client.Configuration`: a kubeconfig's current context with a server, a CA (file or data),
insecure-skip-tls-verify, tls-server-name, a client certificate and key (files or data) and a
bearer token; the in-cluster service account. Anything else, `load` declines (None) and
api.py asks the kubernetes loader, which then gives today's result or today's error: a user
with exec, an auth-provider, a password, a token file or impersonation; a cluster with a
proxy-url; any key not known here; several kubeconfig files to merge; a proxy in the
environment (the kubernetes Configuration resolves it, and no_proxy, from there); a file that
cannot be read or parsed, or whose values are of an unexpected kind or empty.
"""

from __future__ import annotations

import atexit
import base64
import os
import tempfile
import time
import urllib.request  # already loaded on the commands' paths (prometheus_client)
from dataclasses import dataclass, field
from typing import Any

import yaml

IN_CLUSTER_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # the service account's token, CA
# The kubernetes in-cluster loader re-reads its token file once a minute: the kubelet rotates it.
TOKEN_EVERY = 60.0
# What the fast path understands in a kubeconfig; any other key: the kubernetes loader.
CONTEXT_KEYS = {"cluster", "user", "namespace"}
CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data",
                "insecure-skip-tls-verify", "tls-server-name"}
USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data",
             "token"}
# libyaml's parser: a kubeconfig with certificates in it parses in 0.1 ms instead of 1.7 ms;
# the values built are the same (same constructor and resolver as yaml.safe_load).
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_temp_files: list[str] = []  # the decoded client certificates and keys, removed at exit


class Declined(Exception):
    """This source is not one the fast path reads: the kubernetes loader will."""


@dataclass
class ClientConfig:
    """The attributes api.py reads from a kubernetes `client.Configuration`, with the same
    meaning: `ssl_ca_cert` a CA file, `ca_cert_data` PEM text (ssl's `cadata`), `cert_file`
    and `key_file` files (ssl's `load_cert_chain` takes no data)."""
    host: str
    ssl_ca_cert: str | None = None
    ca_cert_data: str | None = None
    verify_ssl: bool = True
    assert_hostname: bool | None = None
    cert_file: str | None = None
    key_file: str | None = None
    tls_server_name: str | None = None
    proxy: str | None = None  # None: a proxy in the environment sends the load to kubernetes
    no_proxy: str | None = None
    proxy_headers: dict[str, str] | None = None
    authorization: str | None = None  # the Authorization header's value, "Bearer ..."
    token_file: str | None = None  # in-cluster: `authorization` is "bearer " + this file
    token_every: float = TOKEN_EVERY  # seconds between two reads of `token_file`
    _token_read: float = field(default=float("-inf"), init=False, repr=False)

    def auth_settings(self) -> dict[str, dict[str, str]]:
        """As kubernetes' `Configuration.auth_settings()` for a bearer token: {} without one."""
        if self.token_file and time.monotonic() - self._token_read >= self.token_every:
            self.authorization = "bearer " + _read_token(self.token_file)
            self._token_read = time.monotonic()
        if not self.authorization:
            return {}
        return {"BearerToken": {"type": "api_key", "in": "header", "key": "authorization",
                                "value": self.authorization}}


def load(kubeconfig: str | None, in_cluster_dir: str = IN_CLUSTER_DIR) -> ClientConfig | None:
    """The settings of `kubeconfig` (a file or a list joined by os.pathsep, as
    ClusterSource.kubeconfig gives it; None: the in-cluster config from `in_cluster_dir`),
    or None when the fast path declines (the module's docstring says when)."""
    if urllib.request.getproxies():  # what a kubernetes Configuration takes its proxy from
        return None
    try:
        return _in_cluster(in_cluster_dir) if kubeconfig is None else _kubeconfig(kubeconfig)
    except Exception:  # Declined, or a file it cannot read: the kubernetes loader says why
        return None


def _in_cluster(directory: str) -> ClientConfig:
    """As kubernetes' InClusterConfigLoader: https to KUBERNETES_SERVICE_HOST:_PORT, the
    service account's token and CA."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise Declined("KUBERNETES_SERVICE_HOST/PORT not set")
    authority = f"[{host}]:{port}" if ":" in host or "%" in host else f"{host}:{port}"
    token_file = os.path.join(directory, "token")
    ca_file = os.path.join(directory, "ca.crt")
    cfg = ClientConfig(host="https://" + authority, ssl_ca_cert=ca_file, token_file=token_file)
    cfg.auth_settings()  # reads the token now: a missing or empty file declines
    with open(ca_file) as f:
        if not f.read():
            raise Declined(f"{ca_file} is empty")
    return cfg


def _read_token(path: str) -> str:
    with open(path) as f:
        token = f.read()  # not stripped, as kubernetes reads it
    if not token:
        raise ValueError(f"{path}: the token file is empty")  # kubernetes raises too
    return token


def _kubeconfig(source: str) -> ClientConfig:
    # The loader skips the listed files that do not exist; several that do are merged (first
    # name wins, last current-context wins): left to it.
    files = [p for p in (os.path.expanduser(p) for p in source.split(os.pathsep) if p)
             if os.path.exists(p)]
    if len(files) != 1:
        raise Declined("not exactly one kubeconfig file")
    path = files[0]
    with open(path) as f:  # the locale's encoding, as the loader opens it
        doc = yaml.load(f, Loader=LOADER)
    if not isinstance(doc, dict):
        raise Declined("not a mapping")
    context = _named(doc, "contexts", _text(doc.get("current-context")), "context", CONTEXT_KEYS)
    cluster = _named(doc, "clusters", _text(context.get("cluster")), "cluster", CLUSTER_KEYS)
    user: dict[str, Any] = {}
    if "user" in context:  # a context without a user: no credentials, as the loader does
        user = _named(doc, "users", _text(context["user"]), "user", USER_KEYS)
    base = os.path.abspath(os.path.dirname(path))  # relative paths: from the kubeconfig's dir

    cfg = ClientConfig(host=_text(cluster.get("server")).rstrip("/"))
    cert = key = (None, None)
    if cfg.host.startswith("https"):  # the loader reads the TLS material for https only
        cfg.ssl_ca_cert, ca_data = _file_or_data(cluster, "certificate-authority", base)
        if ca_data is not None:
            cfg.ca_cert_data = _pem_certificates(ca_data)
        cert = _file_or_data(user, "client-certificate", base)
        key = _file_or_data(user, "client-key", base)
    if "insecure-skip-tls-verify" in cluster:
        skip = cluster["insecure-skip-tls-verify"]
        if not isinstance(skip, bool):
            raise Declined("insecure-skip-tls-verify is not a boolean")
        cfg.verify_ssl = not skip
    if "tls-server-name" in cluster:
        cfg.tls_server_name = _text(cluster["tls-server-name"])
    if "token" in user:
        cfg.authorization = "Bearer " + _text(user["token"])
    cfg.cert_file, cfg.key_file = _as_file(*cert), _as_file(*key)  # last: nothing declines now
    return cfg


def _text(value: object) -> str:
    """A setting's value: a string that is not empty (anything else: the loader's case)."""
    if not isinstance(value, str) or not value:
        raise Declined(f"{value!r} is not a non-empty string")
    return value


def _named(doc: dict, section: str, name: str, inner: str, known: set[str]) -> dict[str, Any]:
    """The `inner` mapping of the entry called `name` in `doc[section]`, whose keys are all
    `known`. Several entries of one name (the loader keeps the first silently), entries
    without a name: declined."""
    entries = doc.get(section)
    if not isinstance(entries, list):
        raise Declined(f"{section} is not a list")
    names = [e.get("name") if isinstance(e, dict) else None for e in entries]
    if None in names or len(set(names)) != len(names) or names.count(name) != 1:
        raise Declined(f"{section}: no single entry named {name!r}")
    value = entries[names.index(name)].get(inner)
    if not isinstance(value, dict) or not set(value) <= known:
        raise Declined(f"{section}[{name}]: a kind or a key the fast path does not read")
    return value


def _file_or_data(obj: dict, key: str, base: str) -> tuple[str | None, bytes | None]:
    """(file, None) or (None, decoded bytes) of `key` / `key-data`, the data first, as the
    loader's FileOrData; (None, None) when neither is given."""
    if key + "-data" in obj:
        # standard_b64decode, as the loader: characters outside the alphabet are skipped
        return None, base64.standard_b64decode(_text(obj[key + "-data"]).encode())
    if key in obj:
        file = os.path.normpath(os.path.join(base, _text(obj[key])))
        if not os.path.isfile(file):
            raise Declined(f"{file}: no such file")  # the loader: "File does not exist: ..."
        return file, None
    return None, None


def _pem_certificates(data: bytes) -> str:
    """A CA's data as ssl's `cadata` takes it: ASCII PEM, certificates only (the loader writes
    it to a file for `cafile`, which would also take CRLs; those are declined)."""
    text = data.decode("ascii")
    blocks = [line for line in text.splitlines() if line.startswith("-----BEGIN ")]
    if not blocks or any(line.strip() != "-----BEGIN CERTIFICATE-----" for line in blocks):
        raise Declined("certificate-authority-data is not PEM certificates")
    return text


def _as_file(file: str | None, data: bytes | None) -> str | None:
    """`file`, or `data` written to a new file only the process owner can read (mkstemp's
    0600), removed at exit as the loader's temporary files are."""
    if data is None:
        return file
    if not _temp_files:
        atexit.register(_remove_temp_files)
    fd, name = tempfile.mkstemp(prefix="kubeconfig-")
    _temp_files.append(name)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return name


def _remove_temp_files() -> None:
    while _temp_files:
        try:
            os.remove(_temp_files.pop())
        except OSError:
            pass
