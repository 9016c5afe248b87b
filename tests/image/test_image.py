"""The image built from the project's Dockerfile, run with podman as the chart runs it:
the numeric user, read-only root file system, no privilege escalation, no capabilities, the
config and certificates mounted read-only where the chart mounts them, emptyDirs for the rest."""

from __future__ import annotations

import base64
import json
import os
import tomllib
import uuid

import kubernetes.client as k
import pytest
import requests
import yaml
from cryptography import x509

from tests.builders import container, pod, review
from tests.harness.compiled import compiled_sources, module_name
from tests.harness.kube import ADMIN, REPO_ROOT, free_ports, make_fake_node
from tests.harness.wait import wait_for
from tests.harness.webhook import make_certs

from . import pod_spec
from .containers import podman, run_once

pytestmark = pytest.mark.image

CONFIG_MOUNT = "/etc/mthreads-webhook/config/config.yaml"
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def chart_config(manifests: list[dict], **changes) -> bytes:
    """The config.yaml of the chart's ConfigMap, with `changes` on top."""
    name = pod_spec.workload(manifests, "webhook").volume("config")["configMap"]["name"]
    [text] = [d["data"]["config.yaml"] for d in manifests
              if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    return yaml.safe_dump({**yaml.safe_load(text), **changes}).encode()


# A server still starting refuses or resets the connection.
NOT_YET = (requests.RequestException, OSError)


# -- what the image is -----------------------------------------------------------------------


def test_image_runs_its_command_as_a_numeric_user_with_nothing_to_build_with(image):
    config = json.loads(podman("image", "inspect", image).stdout)[0]["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["mthreads-webhook"] and config["Cmd"] == ["serve"]
    probe = ("import importlib.util as u, os, shutil, sys, webhook;"
             "print(sys.version_info[:2] >= (3, 11),"
             " [m for m in ('pip', 'setuptools', 'tests') if u.find_spec(m)],"
             " [c for c in ('gcc', 'cc', 'g++') if shutil.which(c)], os.path.exists('/src'),"
             " webhook.__file__.startswith('/opt/mthreads-webhook/'))")
    out = podman("run", "--rm", "--read-only", "--entrypoint", "python3", image, "-c", probe).stdout
    assert out.strip() == "True [] [] False True"


def test_the_image_runs_the_scheduling_core_compiled(image):
    names = [module_name(source) for source in compiled_sources()]
    probe = ("import importlib, importlib.machinery as m, sys;"
             "print([n for n in sys.argv[1:] if not importlib.import_module(n).__file__"
             ".endswith(tuple(m.EXTENSION_SUFFIXES))])")
    out = podman("run", "--rm", "--read-only", "--entrypoint", "python3", image, "-c", probe,
                 *names).stdout
    assert out.strip() == "[]", f"not compiled in the image: {out.strip()}"


def test_the_chart_deploys_the_name_make_image_tags(image, manifests):
    for doc in manifests:
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                name, _, tag = c["image"].partition(":")
                assert name.rsplit("/", 1)[-1] == "mthreads-webhook", c["image"]
                assert tag in ("", VERSION), c["image"]
    tagged = json.loads(podman("image", "inspect", f"localhost/mthreads-webhook:{VERSION}").stdout)[0]
    assert tagged["Id"] == json.loads(podman("image", "inspect", image).stdout)[0]["Id"]


# -- serve -----------------------------------------------------------------------------------


def serve_options(manifests, tmp_path, port: int, config: bytes, extra_args: dict | None = None):
    w = pod_spec.workload(manifests, "webhook")
    certs = make_certs(tmp_path / "certs")
    tls = pod_spec.project(w, "tls", {n: (certs / n).read_bytes() for n in ("tls.crt", "tls.key", "ca.crt")},
                           tmp_path / "tls")
    conf = pod_spec.project(w, "config", {"config.yaml": config}, tmp_path / "config")
    options = pod_spec.run_options(w, volumes={"tls": tls, "config": conf},
                                   arg_overrides={"--bind": f"127.0.0.1:{port}", **(extra_args or {})})
    return options, certs / "ca.crt"


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers"])
def test_serve_answers_health_and_reviews_over_tls(manifests, tmp_path, start_container, workers):
    """Two workers keep their metrics in a multiprocess directory, which must be writable."""
    port = free_ports(1)[0]
    options, ca = serve_options(manifests, tmp_path, port, chart_config(manifests),
                                {"--workers": str(workers)})
    c = start_container(options)
    session = requests.Session()
    session.trust_env, session.verify = False, str(ca)
    url = f"https://127.0.0.1:{port}"
    wait_for(lambda: session.get(f"{url}/readyz", timeout=2).status_code == 200, 90, 0.3, "/readyz",
             alive=c, retry_on=NOT_YET)
    assert session.get(f"{url}/healthz", timeout=5).status_code == 200

    r = review(pod(container("gpu", 1, 32, 8)))
    answer = session.post(f"{url}/mutate", json=r, timeout=10).json()["response"]
    assert answer["uid"] == r["request"]["uid"] and answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"]))
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch \
        or {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in patch
    denied = session.post(f"{url}/validate", json=review(pod(container("gpu", 1, 33))),
                          timeout=10).json()["response"]
    assert denied["allowed"] is False and "33" in denied["status"]["message"]
    metrics = session.get(f"{url}/metrics", timeout=5)
    assert metrics.status_code == 200 and "mthreads_webhook" in metrics.text
    assert c.stop() == 0, c.tail()


# -- certs and a bad start -------------------------------------------------------------------


def test_certs_writes_where_it_is_told(image, manifests, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, 10001, 10001)
    w = pod_spec.workload(manifests, "webhook")  # a one-off command in the webhook's pod
    volumes = {v: pod_spec.project(w, v, {}, tmp_path / v) for v in ("tls", "config")}
    options = pod_spec.run_options(w, volumes=volumes,
                                   args=["certs", "--out=/out", "--namespace=gpu-system"])
    done = run_once(image, ["-v", f"{out}:/out", *options])
    assert done.returncode == 0, done.stderr
    assert "wrote /out/ca.crt" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (out / "tls.key").stat().st_mode & 0o077 == 0 and (out / "ca.key").stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "mthreads-webhook.gpu-system.svc" in names.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize("name", ["webhook", "allocator"])
def test_a_bad_config_file_gives_one_line_and_exit_code_2(image, manifests, tmp_path, name):
    w = pod_spec.workload(manifests, name)
    volumes = {"config": pod_spec.project(
        w, "config", {"config.yaml": chart_config(manifests, nodePolicy="fastest")}, tmp_path / "config")}
    if name == "webhook":
        volumes["tls"] = pod_spec.project(w, "tls", {}, tmp_path / "tls")
    done = run_once(image, pod_spec.run_options(w, volumes=volumes,
                                                fields={"metadata.namespace": "kube-system"}))
    assert done.returncode == 2, done.stdout + done.stderr
    line, = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith(f"mthreads-webhook: config: {CONFIG_MOUNT}: nodePolicy: unknown key"), line


# -- allocate and extender against the test API server ---------------------------------------


@pytest.fixture
def cluster_place(kube_cluster, tmp_path):
    """A namespace, a fake node with two S4000 cards, a scheduler name of the test's own (no
    other test's pod is this test's), and the in-cluster service account files."""
    admin = kube_cluster.api_client(ADMIN)
    core = k.CoreV1Api(admin)
    tag = uuid.uuid4().hex[:8]
    ns, node, scheduler = f"image-{tag}", f"image-node-{tag}", f"image-scheduler-{tag}"
    core.create_namespace({"metadata": {"name": ns}})
    make_fake_node(admin, node, 2, 96)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    # The admin's token: these tests are about the image, the RBAC has tests of its own.
    (sa / "token").write_text(kube_cluster.token(ADMIN))
    (sa / "ca.crt").write_bytes(kube_cluster.ca_file.read_bytes())
    (sa / "namespace").write_text(ns)
    port = int(kube_cluster.url.rsplit(":", 1)[1])
    yield {"core": core, "ns": ns, "node": node, "scheduler": scheduler,
           "service_account": (sa, "127.0.0.1", port)}
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    core.delete_node(node)
    core.delete_namespace(ns)


def gpu_pod(place: dict, name: str) -> dict:
    """A pod in the form the webhook admits it (its scheduler name, one 32-unit slice)."""
    p = pod(container("gpu", 1, 32, 8), scheduler=place["scheduler"], name=name)
    p["metadata"]["namespace"] = place["ns"]
    return json.loads(place["core"].create_namespaced_pod(place["ns"], p, _preload_content=False).data)


def read_pod(place: dict, name: str) -> dict:
    return json.loads(place["core"].read_namespaced_pod(name, place["ns"], _preload_content=False).data)


def allocator_options(manifests, tmp_path, place, port: int, args: list[str] | None = None):
    w = pod_spec.workload(manifests, "allocator")
    config = chart_config(manifests, schedulerName=place["scheduler"])
    conf = pod_spec.project(w, "config", {"config.yaml": config}, tmp_path / "config")
    overrides = {} if args else {"--metrics-bind": f"127.0.0.1:{port}"}
    return pod_spec.run_options(w, volumes={"config": conf}, fields={"metadata.namespace": place["ns"]},
                                service_account=place["service_account"], arg_overrides=overrides,
                                args=args)


def assert_bound_with_cards(p: dict, node: str) -> None:
    assert p["spec"]["nodeName"] == node
    ann = p["metadata"]["annotations"]
    assert ann["hami.io/vgpu-node"] == node
    assert ann["hami.io/mthreads-vgpu-devices-allocated"].startswith(f"{node}-mthreads-")
    assert ann["hami.io/mthreads-vgpu-devices-allocated"].endswith(",Mthreads,16384,8:;")


def test_allocate_binds_a_pod_in_cluster(manifests, tmp_path, start_container, cluster_place):
    port = free_ports(1)[0]
    c = start_container(allocator_options(manifests, tmp_path, cluster_place, port))
    wait_for(lambda: requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200,
             90, 0.3, "allocator /healthz", alive=c, retry_on=NOT_YET)
    gpu_pod(cluster_place, "gpu")

    def bound():
        p = read_pod(cluster_place, "gpu")
        return p if p["spec"].get("nodeName") else None

    assert_bound_with_cards(wait_for(bound, 60, 0.3, "the pod bound", alive=c, retry_on=NOT_YET),
                            cluster_place["node"])
    assert c.stop() == 0, c.tail()


def test_extender_binds_a_pod_in_cluster(manifests, tmp_path, start_container, cluster_place):
    port = free_ports(1)[0]
    args = ["extender", f"--config={CONFIG_MOUNT}", f"--bind=127.0.0.1:{port}"]
    c = start_container(allocator_options(manifests, tmp_path, cluster_place, port, args))
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: requests.get(f"{url}/readyz", timeout=2).status_code == 200, 90, 0.3,
             "extender /readyz", alive=c, retry_on=NOT_YET)
    created = gpu_pod(cluster_place, "gpu")

    def bind():  # until the extender's cache has seen the pod
        answer = requests.post(f"{url}/bind", timeout=10, json={
            "PodName": "gpu", "PodNamespace": cluster_place["ns"],
            "PodUID": created["metadata"]["uid"], "Node": cluster_place["node"]}).json()
        return answer if answer.get("Error") == "" else None

    wait_for(bind, 30, 0.3, "a successful /bind", alive=c, retry_on=NOT_YET)
    assert_bound_with_cards(read_pod(cluster_place, "gpu"), cluster_place["node"])
    assert c.stop() == 0, c.tail()
