"""The kubeconfig fast path (webhook/kube/client_config.py) against the kubernetes client's own
loaders: for each shape it reads, the same settings as the loader puts in a
`client.Configuration`, attribute by attribute; for each shape it declines, the loader's
result or its error through `client_configuration`; the in-cluster config and its token's
re-read; and the test cluster's kubeconfig, read by the fast path, answering a real call."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client
from kubernetes.config import incluster_config, kube_config

from tests.harness.kube import ADMIN, write_pki
from webhook.kube import client_config
from webhook.kube.api import Api, KubeconfigError, client_configuration, ssl_context
from webhook.kube.client_config import ClientConfig

SERVER = "https://127.0.0.1:6443"


@pytest.fixture(autouse=True)
def no_proxy_in_environment(monkeypatch):
    """A proxy in the environment sends every load to kubernetes: none unless a case sets one."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> SimpleNamespace:
    """A CA, and a certificate and key it signed (used here as a client's)."""
    paths = write_pki(tmp_path_factory.mktemp("pki"))
    return SimpleNamespace(ca=paths["ca.crt"], cert=paths["apiserver.crt"], key=paths["apiserver.key"])


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, cluster: dict, user: dict | None = None, context: dict | None = None,
                     **top) -> str:
    """A kubeconfig of one context, "here", with its cluster and user (no user: None)."""
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [{"name": "here", "context": {"cluster": "c", **({"user": "u"} if user is not None else {}),
                                                  **(context or {})}}],
        "users": [{"name": "u", "user": user}] if user is not None else [],
        **top,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def kubernetes_loaded(source: str) -> client.Configuration:
    """What the kubernetes loader makes of `source`, as api.py called it before the fast path."""
    cfg = client.Configuration()
    kube_config.load_kube_config(config_file=source, client_configuration=cfg, persist_config=False)
    return cfg


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def settings(cfg) -> dict:
    """Everything api.py reads of a configuration, files by their contents (the loader writes
    its decoded data to temporary files, the fast path gives a CA's as PEM text)."""
    ca = _read(cfg.ssl_ca_cert) if cfg.ssl_ca_cert else (cfg.ca_cert_data or "").encode() or None
    return {
        "host": cfg.host, "verify_ssl": cfg.verify_ssl, "assert_hostname": cfg.assert_hostname,
        "tls_server_name": cfg.tls_server_name, "ca": ca,
        "cert": _read(cfg.cert_file), "key": _read(cfg.key_file),
        "auth_settings": cfg.auth_settings(),
        "proxy": cfg.proxy, "no_proxy": cfg.no_proxy, "proxy_headers": cfg.proxy_headers,
    }


# -- what the fast path reads ------------------------------------------------------------------

def _relative(tmp_path: Path, pki) -> str:
    """The kubeconfig in kube/, its certificates in ../certs, named relative to it."""
    certs = tmp_path / "certs"
    certs.mkdir()
    for p in (pki.ca, pki.cert, pki.key):
        (certs / p.name).write_bytes(p.read_bytes())
    return write_kubeconfig(
        tmp_path / "kube" / "config",
        {"server": SERVER, "certificate-authority": "../certs/ca.crt"},
        {"client-certificate": "../certs/apiserver.crt", "client-key": "../certs/apiserver.key"})


READ = {
    "ca file + token": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca)}, {"token": "abc"}),
    "ca data": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority-data": b64(p.ca)}),
    "ca data + token": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority-data": b64(p.ca)}, {"token": "t.o-k_en"}),
    "ca data before the ca file": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority-data": b64(p.ca),
                       "certificate-authority": str(p.cert)}),
    "insecure": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "insecure-skip-tls-verify": True}, {"token": "abc"}),
    "insecure false": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "insecure-skip-tls-verify": False,
                       "certificate-authority": str(p.ca)}),
    "tls-server-name": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca),
                       "tls-server-name": "kubernetes.default"}, {"token": "abc"}),
    "client cert + key files": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca)},
        {"client-certificate": str(p.cert), "client-key": str(p.key)}),
    "client cert + key data": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority-data": b64(p.ca)},
        {"client-certificate-data": b64(p.cert), "client-key-data": b64(p.key)}),
    "cert + key data and a token": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca)},
        {"client-certificate-data": b64(p.cert), "client-key-data": b64(p.key), "token": "abc"}),
    "token, no CA": lambda t, p: write_kubeconfig(t / "config", {"server": SERVER}, {"token": "abc"}),
    "relative paths": _relative,
    "no user": lambda t, p: write_kubeconfig(t / "config", {"server": SERVER, "certificate-authority": str(p.ca)}),
    "a path prefix and a trailing slash": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER + "/k8s/", "certificate-authority": str(p.ca)}, {"token": "abc"}),
    "http: the TLS files are not read": lambda t, p: write_kubeconfig(
        t / "config", {"server": "http://127.0.0.1:8080", "certificate-authority": str(t / "absent")},
        {"token": "abc", "client-certificate": str(t / "absent")}),
    "a namespace and preferences": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca)}, {"token": "abc"},
        {"namespace": "ns"}, preferences={}),
    "a list with one existing file": lambda t, p: str(t / "absent") + os.pathsep + write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": str(p.ca)}, {"token": "abc"}),
}


@pytest.mark.parametrize("shape", READ)
def test_the_fast_path_reads_what_the_kubernetes_loader_reads(shape, tmp_path, pki):
    source = READ[shape](tmp_path, pki)
    fast = client_config.load(source)
    assert isinstance(fast, ClientConfig)
    assert settings(fast) == settings(kubernetes_loaded(source))
    used = client_configuration(source)  # what api.py uses
    assert isinstance(used, ClientConfig) and settings(used) == settings(fast)
    if fast.host.startswith("https"):  # and the same TLS context comes out of it
        mine, theirs = ssl_context(fast), ssl_context(kubernetes_loaded(source))
        assert mine.get_ca_certs() == theirs.get_ca_certs()
        assert (mine.verify_mode, mine.check_hostname) == (theirs.verify_mode, theirs.check_hostname)
    for written in (fast.cert_file, fast.key_file):  # decoded data: files for the owner alone
        if written and "data" in shape:
            assert stat.S_IMODE(os.stat(written).st_mode) == 0o600


def test_a_token_gives_the_authorization_header_the_kubernetes_client_would_send(tmp_path, pki):
    source = READ["ca file + token"](tmp_path, pki)
    assert client_config.load(source).auth_settings() == {"BearerToken": {
        "type": "api_key", "in": "header", "key": "authorization", "value": "Bearer abc"}}
    assert client_config.load(READ["no user"](tmp_path, pki)).auth_settings() == {}


# -- what it leaves to the kubernetes loader -----------------------------------------------------

def _exec_user(t, p):
    credential = ('{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",'
                  ' "status": {"token": "from-exec"}}')
    return write_kubeconfig(t / "config", {"server": SERVER, "certificate-authority": str(p.ca)},
                            {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                      "command": "echo", "args": [credential]}})


def _token_file(t, p):
    (t / "token.txt").write_text("from-a-file")
    return write_kubeconfig(t / "config", {"server": SERVER}, {"tokenFile": "token.txt"})


def _two_files(t, p):
    first = write_kubeconfig(t / "a", {"server": SERVER, "certificate-authority": str(p.ca)}, {"token": "a"})
    second = write_kubeconfig(t / "b", {"server": "https://127.0.0.2:6443"}, {"token": "b"})
    return first + os.pathsep + second


def _text(text):
    def build(t, p):
        (t / "config").write_text(text)
        return str(t / "config")
    return build


DECLINED = {
    "exec": _exec_user,
    "auth-provider": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER}, {"auth-provider": {"name": "gcp", "config": {
            "access-token": "from-gcp", "expiry": "2999-01-01T00:00:00Z"}}}),
    "username/password": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER}, {"username": "me", "password": "secret"}),
    "tokenFile": _token_file,
    "impersonation": lambda t, p: write_kubeconfig(t / "config", {"server": SERVER}, {"token": "abc", "as": "bob"}),
    "proxy-url": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "proxy-url": "http://127.0.0.1:3128"}, {"token": "abc"}),
    "HTTPS_PROXY": READ["ca file + token"],
    "http_proxy, an http server": READ["http: the TLS files are not read"],
    "NO_PROXY alone": READ["ca file + token"],
    "an unknown cluster key": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "disable-compression": True}, {"token": "abc"}),
    "an unknown context key": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER}, {"token": "abc"}, {"extensions": []}),
    "two existing files": _two_files,
    "no server": lambda t, p: write_kubeconfig(t / "config", {"certificate-authority": str(p.ca)}),
    "a user the context names but that is absent": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER}, context={"user": "nobody"}),
    # errors: the kubernetes loader's message, wrapped in KubeconfigError
    "broken YAML": _text("clusters: [\n  - name: c\n    cluster: {server: "),
    "an empty file": _text(""),
    "no current-context": _text("clusters: []\ncontexts: []\nusers: []\n"),
    "a missing CA file": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority": "absent.crt"}, {"token": "abc"}),
    "a missing context": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER}, {"token": "abc"}, **{"current-context": "elsewhere"}),
    "bad base64": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "certificate-authority-data": "abc"}, {"token": "abc"}),
    "insecure as text": lambda t, p: write_kubeconfig(
        t / "config", {"server": SERVER, "insecure-skip-tls-verify": "true"}, {"token": "abc"}),
}


ENVIRONMENT = {  # the shapes above that a variable makes declined
    "HTTPS_PROXY": {"HTTPS_PROXY": "http://127.0.0.1:3128"},
    "http_proxy, an http server": {"http_proxy": "http://127.0.0.1:3128"},
    "NO_PROXY alone": {"NO_PROXY": "127.0.0.1"},
}


@pytest.mark.parametrize("shape", [pytest.param(s, marks=pytest.mark.process) if s == "exec" else s
                                   for s in DECLINED])  # exec runs echo
def test_other_shapes_go_to_the_kubernetes_loader_unchanged(shape, tmp_path, pki, monkeypatch):
    for name, value in ENVIRONMENT.get(shape, {}).items():
        monkeypatch.setenv(name, value)
    source = DECLINED[shape](tmp_path, pki)
    assert client_config.load(source) is None
    try:
        expected, error = kubernetes_loaded(source), None
    except Exception as e:
        expected, error = None, e
    if error is not None:
        with pytest.raises(KubeconfigError, match=re.escape(f"kubeconfig {source}: cannot use it: {error}")):
            client_configuration(source)
    else:
        got = client_configuration(source)
        assert isinstance(got, client.Configuration)
        assert settings(got) == settings(expected)


def test_the_declined_shapes_give_what_they_should(tmp_path, pki, monkeypatch):
    """A few of the loader's answers spelled out: the table above only compares."""
    assert client_configuration(_token_file(tmp_path, pki)).auth_settings()["BearerToken"]["value"] \
        == "Bearer from-a-file"
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert client_configuration(READ["ca file + token"](tmp_path, pki)).proxy == "http://127.0.0.1:3128"


# -- the in-cluster config -----------------------------------------------------------------------

@pytest.fixture
def service_account(tmp_path, pki, monkeypatch):
    """A service account's directory (token, ca.crt) and the variables a pod has."""
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text("sa-token")
    (directory / "ca.crt").write_bytes(pki.ca.read_bytes())
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return directory


def incluster_loaded(directory: Path) -> client.Configuration:
    cfg = client.Configuration()
    incluster_config.InClusterConfigLoader(
        token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt"),
        environ=os.environ).load_and_set(cfg)
    return cfg


@pytest.mark.parametrize("host, url", [("10.0.0.1", "https://10.0.0.1:443"),
                                       ("fd00::1", "https://[fd00::1]:443")])
def test_the_in_cluster_config_is_what_the_kubernetes_loader_makes(service_account, monkeypatch, host, url):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    fast = client_config.load(None, str(service_account))
    assert settings(fast) == settings(incluster_loaded(service_account))
    assert fast.host == url
    assert fast.auth_settings()["BearerToken"]["value"] == "bearer sa-token"


def test_the_default_service_account_directory_is_the_kubernetes_loaders():
    assert os.path.join(client_config.IN_CLUSTER_DIR, "token") == incluster_config.SERVICE_TOKEN_FILENAME
    assert os.path.join(client_config.IN_CLUSTER_DIR, "ca.crt") == incluster_config.SERVICE_CERT_FILENAME


def test_a_rotated_token_is_read_again_after_a_minute(service_account, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(client_config, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    cfg = client_config.load(None, str(service_account))

    def header():
        return cfg.auth_settings()["BearerToken"]["value"]

    (service_account / "token").write_text("rotated")
    clock[0] += client_config.TOKEN_EVERY - 1
    assert header() == "bearer sa-token"
    clock[0] += 1
    assert header() == "bearer rotated"


@pytest.mark.parametrize("missing", ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "token",
                                     "ca.crt", "empty token", "empty ca.crt"])
def test_an_incomplete_in_cluster_config_is_declined(service_account, monkeypatch, missing):
    if missing.startswith("KUBERNETES"):
        monkeypatch.delenv(missing)
    elif missing.startswith("empty"):
        (service_account / missing.split()[1]).write_text("")
    else:
        (service_account / missing).unlink()
    assert client_config.load(None, str(service_account)) is None


def test_no_in_cluster_config_is_the_kubernetes_loaders_error(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="the in-cluster config: cannot use it: Service host/port is not set"):
        client_configuration(None)


# -- the test cluster ----------------------------------------------------------------------------

@pytest.mark.cluster
@pytest.mark.parametrize("ca", ["file", "data"])
@pytest.mark.parametrize("token, status", [("right", 200), ("wrong", 401)])
def test_the_test_clusters_kubeconfig_read_by_the_fast_path_answers(kube_cluster, tmp_path, ca, token, status):
    source = str(kube_cluster.kubeconfig(ADMIN))
    if ca == "data" or token == "wrong":
        doc = yaml.safe_load(Path(source).read_text())
        cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
        if ca == "data":
            cluster["certificate-authority-data"] = b64(Path(cluster.pop("certificate-authority")))
        if token == "wrong":
            user["token"] = "not-" + user["token"]
        source = str(tmp_path / "config")
        Path(source).write_text(yaml.safe_dump(doc))
    cfg = client_configuration(source)
    assert isinstance(cfg, ClientConfig)
    reply = asyncio.run(Api(cfg, connections=1).call("GET", "/api/v1/nodes", {"limit": "1"}))
    assert reply.status == status
    if status == 200:
        assert reply.body["kind"] == "NodeList"
