"""Quantities as kube-scheduler counts them (scheduling/resources.py, scheduling/quantity.py): cpu
in millicores rounded up, everything else in whole units rounded up (allocatable down), anything
unreadable or not positive 0, anything past int64 2^63-1 as Value and MilliValue saturate; the
same answer for a text read the first time and read again (the texts' answers are kept); and
every text read in bounded time, whatever its exponent or length (issue 46, finding 1)."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from tests.builders import container_status, mt_node, pod_requesting, requesting, resize_pending
from tests.harness.schema import valid_at
from webhook.model.config import MthreadsConfig
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.effective_requests import requests_problem
from webhook.scheduling.feasible import node_reasons
from webhook.scheduling.node_fit import resources_reason
from webhook.scheduling.pod_facts import host_ports
from webhook.scheduling.pod_shape import shape_of
from webhook.scheduling.reasons import (
    INSUFFICIENT_CPU,
    INSUFFICIENT_EPHEMERAL_STORAGE,
    INSUFFICIENT_MEMORY,
    TOO_MANY_PODS,
)
from webhook.scheduling.resources import (
    Resources,
    _whole_or_zero,
    cpu_milli,
    device_allocatable,
    device_requests,
    node_allocatable,
    pod_requests,
    whole_units,
)

MAX = 2**63 - 1
MANY = 1_000_000  # digits: a pod's quantity may be as long as the API server's 3 MiB request

CPU = [
    ("100m", 100), ("1", 1000), ("1.5", 1500), ("0.1m", 1), ("2k", 2_000_000), ("1e-3", 1),
    (" 250m ", 250), ("0", 0), ("-1", 0), ("abc", 0), ("", 0), ("1Qi", 0),
    (2, 2000), (0.25, 250), (Decimal("0.5"), 0), (True, 0), (None, 0), ([], 0),
]
WHOLE = [
    ("2Gi", 2 * 2**30), ("1Ki", 1024), ("1k", 1000), ("1e3", 1000), ("500m", 1), ("1.2", 2),
    ("16", 16), ("0", 0), ("-3", 0), ("12x", 0), ("", 0),
    (3, 3), (2.5, 3), (False, 0), (None, 0), ({}, 0),
]


# (text, whole units rounded up, millicores rounded up, whole units rounded down)
LIMITS = [
    # every suffix
    ("1", 1, 1000, 1), ("1n", 1, 1, 0), ("1500u", 1, 2, 0), ("1500m", 2, 1500, 1),
    ("2k", 2000, 2_000_000, 2000), ("2M", 2 * 10**6, 2 * 10**9, 2 * 10**6),
    ("2G", 2 * 10**9, 2 * 10**12, 2 * 10**9), ("2T", 2 * 10**12, 2 * 10**15, 2 * 10**12),
    ("2P", 2 * 10**15, 2 * 10**18, 2 * 10**15), ("2E", 2 * 10**18, MAX, 2 * 10**18),
    ("3Ki", 3 * 2**10, 3 * 2**10 * 1000, 3 * 2**10), ("3Mi", 3 * 2**20, 3 * 2**20 * 1000, 3 * 2**20),
    ("3Gi", 3 * 2**30, 3 * 2**30 * 1000, 3 * 2**30), ("3Ti", 3 * 2**40, 3 * 2**40 * 1000, 3 * 2**40),
    ("3Pi", 3 * 2**50, 3 * 2**50 * 1000, 3 * 2**50), ("9Pi", 9 * 2**50, MAX, 9 * 2**50), ("3Ei", 3 * 2**60, MAX, 3 * 2**60), ("8Ei", MAX, MAX, MAX), ("0.5Ki", 512, 512_000, 512),
    ("1.0000001Ki", 1025, 1_024_001, 1024),
    ("7.9999Ei", 9223256744704315124, MAX, 9223256744704315123),
    # the edge of int64
    ("9223372036854775807", MAX, MAX, MAX), ("9223372036854775808", MAX, MAX, MAX),
    ("9223372036854775806.5", MAX, MAX, MAX - 1), ("9.223372036854775807E", MAX, MAX, MAX),
    ("9223372036854775k", MAX - 807, MAX, MAX - 807), ("1e18", 10**18, MAX, 10**18),
    ("1e19", MAX, MAX, MAX),
    # huge exponents (the API server keeps an exponent up to 2^31 and writes it canonical)
    ("1e1000000", MAX, MAX, MAX), ("10e999999", MAX, MAX, MAX), ("1e750000", MAX, MAX, MAX),
    ("1e2147483647", MAX, MAX, MAX), ("1E+300000", MAX, MAX, MAX),
    ("1e2147483648", 0, 0, 0), ("1e99999999999999999999", 0, 0, 0),  # past int32: refused
    # negative exponents
    ("1e-3", 1, 1, 0), ("1e-1000000", 1, 1, 0), ("1e-2147483648", 1, 1, 0),
    ("5e-1", 1, 500, 0), ("25e-1", 3, 2500, 2), ("1e-2147483649", 0, 0, 0),
    # huge mantissas and many digits
    ("9" * 5000, MAX, MAX, MAX), ("1" + "0" * MANY, MAX, MAX, MAX), ("0" * MANY + "7", 7, 7000, 7),
    ("0." + "0" * MANY + "1", 1, 1, 0), ("1." + "0" * MANY, 1, 1000, 1),
    ("2." + "0" * MANY + "1", 3, 2001, 2), ("1" * 40 + "e-39", 2, 1112, 1),
    ("0." + "9" * 100 + "Ei", 2**60, MAX, 2**60 - 1), ("1." + "0" * 80 + "1Ei", 2**60 + 1, MAX, 2**60),
    # not positive, not a quantity (the API server stores none of them in a request)
    ("0", 0, 0, 0), ("-1e1000000", 0, 0, 0), ("-5", 0, 0, 0), (".", 0, 0, 0), ("1e3Ki", 0, 0, 0),
    ("1e", 0, 0, 0), ("٣", 0, 0, 0), ("1 Gi", 0, 0, 0), ("1e1000000x", 0, 0, 0),
    # numbers, as YAML or a test gives them
    (10**30, MAX, MAX, MAX), (1e300, MAX, MAX, MAX), (float("inf"), 0, 0, 0),
    (float("nan"), 0, 0, 0), (-(10**30), 0, 0, 0), (1.5, 2, 1500, 1),
]


def _label(case: tuple) -> str:
    text = str(case[0])
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} chars)"


@pytest.mark.parametrize("raw, up, milli, down", LIMITS, ids=[_label(c) for c in LIMITS])
def test_quantities_past_int64_and_their_edges(raw, up, milli, down):
    assert (whole_units(raw), cpu_milli(raw), _whole_or_zero(raw)) == (up, milli, down)


def test_the_worst_quantities_are_read_in_bounded_time():
    """1e750000 took 14.6 s to read (Decimal's integral of it); each now takes microseconds, a
    million digits a few milliseconds: 2 s for them all is a margin for a busy machine."""
    worst = ["1e300000", "1e750000", "10e999999", "9" * MANY, "0." + "0" * MANY + "1",
             "1e" + "0" * 100 + "9", "1" * MANY + "e-999990"]
    start = time.perf_counter()
    for text in worst:
        whole_units(text), cpu_milli(text), _whole_or_zero(text)
    assert time.perf_counter() - start < 2.0


def test_a_node_and_a_pod_past_int64_read_as_kube_scheduler_reads_them():
    node = mt_node("n", 2, 96, cpu="1e1000000")
    node["status"]["allocatable"].update({"pods": "1e400000", "ephemeral-storage": "10e999999"})
    node["status"]["allocatable"]["mthreads.com/sgpu-memory"] = "1e300000"
    alloc = node_allocatable(node)
    assert (alloc.cpu_milli, alloc.pods, alloc.amount("ephemeral-storage")) == (MAX, MAX, MAX)
    assert device_allocatable(node, ("mthreads.com/vgpu", "mthreads.com/sgpu-memory",
                                     "mthreads.com/sgpu-core"))[1] == MAX
    pod = {"spec": {"containers": [{"resources": {"requests": {"ephemeral-storage": "10e999999",
                                                               "cpu": "1e-1000000"}}}]}}
    r = pod_requests(pod)
    assert (r.cpu_milli, r.other) == (1, (("ephemeral-storage", MAX),))


@pytest.mark.parametrize("raw, milli", CPU)
def test_cpu_in_millicores(raw, milli):
    assert cpu_milli(raw) == milli
    assert cpu_milli(raw) == milli  # read again: the kept answer is the same


@pytest.mark.parametrize("raw, units", WHOLE)
def test_whole_units(raw, units):
    assert whole_units(raw) == units
    assert whole_units(raw) == units


def test_a_text_and_its_number_count_alike():
    assert cpu_milli("0.25") == cpu_milli(0.25) == 250
    assert whole_units("3") == whole_units(3) == 3


def test_pod_requests_read_the_texts_of_every_container():
    pod = {"spec": {"containers": [
        {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
        {"resources": {"limits": {"cpu": "1", "memory": "512Mi", "example.com/nic": "2"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "2"}}}]}}
    r = pod_requests(pod)
    assert (r.cpu_milli, r.memory_bytes, r.pods, r.other) == (
        2000, 2**30 + 2**29, 1, (("example.com/nic", 2),))


# -- a pod's requests as kube-scheduler of today counts them (upstream's PodRequests) ----------
# The situations of upstream's component-helpers resource/helpers_test.go and the NodeResourcesFit
# fit_test.go; each pod is one 1.37's API server accepts (valid_at). Expected: (millicores, bytes
# of memory, the other resources).

GI = 2**30
R = requesting


def _p(*containers, **kw):
    return valid_at(pod_requesting(*containers, **kw))


SIDECARS = [
    ("app containers are summed", _p(R("a", "1"), R("b", "2")), 3000, 0, ()),
    ("a regular init container larger than the app containers wins",
     _p(R("a", "1"), init=(R("i", "4"),)), 4000, 0, ()),
    ("a sidecar adds to the app containers", _p(R("a", "1"), init=(R("s", "1", sidecar=True),)),
     2000, 0, ()),
    ("a sidecar with larger requests than the app container",
     _p(R("a", "1"), init=(R("s", "2", sidecar=True),)), 3000, 0, ()),
    ("a regular init container after a sidecar counts with it",
     _p(R("a", "1"), init=(R("s", "1", sidecar=True), R("i", "2"))), 3000, 0, ()),
    ("a regular init container before a sidecar counts alone",
     _p(R("a", "500m"), init=(R("i", "3"), R("s", "1", sidecar=True))), 3000, 0, ()),
    ("several sidecars all add", _p(R("a", "1"), init=(R("s1", "1", sidecar=True),
                                                       R("s2", "2", sidecar=True),
                                                       R("s3", "3", sidecar=True))), 7000, 0, ()),
    ("regular init containers between sidecars count with the sidecars before each",
     _p(R("a", "1"), init=(R("i1", "5"), R("s1", "1", sidecar=True), R("i2", "5"),
                           R("s2", "2", sidecar=True), R("i3", "5"))), 8000, 0, ()),
    ("the overhead is added to the sidecars' sum",
     _p(R("a", "1"), init=(R("s", "1", sidecar=True),), overhead={"cpu": "500m"}), 2500, 0, ()),
    ("memory: the largest of the init steps and the running sum",
     _p(R("a", memory="1Gi"), init=(R("s", memory="1Gi", sidecar=True), R("i", memory="2Gi"))),
     0, 3 * GI, ()),
    ("every resource: an extended resource of a sidecar adds",
     _p(R("a", other={"example.com/foo": "1"}),
        init=(R("s", other={"example.com/foo": "1"}, sidecar=True),)), 0, 0,
     (("example.com/foo", 2),)),
    ("a sidecar that only limits requests its limits (a pod not defaulted yet)",
     _p(R("a", "1"), init=(R("s", limits={"cpu": "2"}, sidecar=True),)), 3000, 0, ()),
    ("restartPolicy other than Always is a regular init container",
     _p(R("a", "1"), init=(dict(R("i", "2"), restartPolicy="OnFailure"),)), 2000, 0, ()),
]

POD_LEVEL = [
    ("pod-level requests replace the containers' sum",
     _p(R("a", "1", "1Gi"), R("b", "1"), resources={"requests": {"cpu": "3", "memory": "2Gi"}}),
     3000, 2 * GI, ()),
    ("pod-level requests without container values",
     _p(R("a"), R("b"), resources={"requests": {"cpu": "2", "memory": "1Gi"}}), 2000, GI, ()),
    ("pod-level limits alone: the requests default to them",
     _p(R("a"), resources={"limits": {"cpu": "2", "memory": "1Gi"}}), 2000, GI, ()),
    ("pod-level limits, containers requesting cpu: the containers' sum stands for cpu",
     _p(R("a", "1"), resources={"limits": {"cpu": "4", "memory": "1Gi"}}), 1000, GI, ()),
    ("a resource pod-level does not list stays the containers' sum",
     _p(R("a", "1", "1Gi"), resources={"requests": {"cpu": "2"}}), 2000, GI, ()),
    ("the overhead is added to the pod-level requests",
     _p(R("a"), resources={"requests": {"cpu": "2"}}, overhead={"cpu": "250m"}), 2250, 0, ()),
    ("resources pod-level does not carry count as the containers request them",
     _p(R("a", other={"ephemeral-storage": "1Gi"}), resources={"requests": {"cpu": "1"}}), 1000, 0,
     (("ephemeral-storage", GI),)),
    ("pod-level requests replace the sidecars' sum too",
     _p(R("a", "2"), init=(R("s", "2", sidecar=True),), resources={"requests": {"cpu": "5"}}),
     5000, 0, ()),
]


@pytest.mark.parametrize("pod, cpu, memory, other",
                         [c[1:] for c in SIDECARS + POD_LEVEL], ids=[c[0] for c in SIDECARS + POD_LEVEL])
def test_pod_requests_as_upstreams_pod_requests(pod, cpu, memory, other):
    got = pod_requests(pod)
    assert (got.cpu_milli, got.memory_bytes, got.other, got.pods) == (cpu, memory, other, 1)
    assert pod_requests(pod, use_status=True) == got  # no status: a bound pod counts the same


def _bound(spec_cpu: str, allocated: str | None, actual: str | None, condition: str | None = None,
           sidecar: bool = False) -> dict:
    c = R("c", spec_cpu, sidecar=sidecar)
    containers, init = ((R("a", "1"),), (c,)) if sidecar else ((c,), ())
    status = {"phase": "Running",
              "containerStatuses" if not sidecar else "initContainerStatuses": [
                  container_status("c", allocated and {"cpu": allocated}, actual and {"cpu": actual})]}
    if condition:
        status["conditions"] = [resize_pending(condition)]
    return _p(*containers, init=init, node="n1", status=status)


# (spec, allocated, actuated, PodResizePending's reason) -> what the bound pod counts for
RESIZE = [
    ("not resized: the spec", _bound("1", "1", "1"), 1000),
    ("an increase pending: the spec, larger than what was allocated", _bound("2", "1", "1"), 2000),
    ("an increase deferred: the spec still counts", _bound("2", "1", "1", "Deferred"), 2000),
    ("an increase infeasible: what was allocated and actuated, not the spec",
     _bound("2", "1", "1", "Infeasible"), 1000),
    ("an increase allocated, in progress: the allocation", _bound("2", "2", "1"), 2000),
    ("a decrease not yet allocated: what was allocated", _bound("1", "2", "2"), 2000),
    ("a decrease allocated, not yet actuated: what runs", _bound("1", "1", "2"), 2000),
    ("a decrease done: the spec", _bound("1", "1", "1"), 1000),
    ("allocated but no actuated resources: the allocation", _bound("1", "2", None), 2000),
    ("infeasible with nothing in the status: nothing for the container",
     _bound("2", None, None, "Infeasible"), 0),
    ("a sidecar's allocation adds to the app containers", _bound("1", "2", "2", sidecar=True), 3000),
]


def _bound_pod_level(spec_cpu: str, allocated: str | None, actual: str | None,
                     condition: str | None = None, overhead: str | None = None) -> dict:
    """A pod of pod-level cpu `spec_cpu`, its pod-level status (1.36) as the kubelet writes it."""
    status: dict = {"phase": "Running", "containerStatuses": [container_status("c")]}
    if allocated:
        status["allocatedResources"] = {"cpu": allocated}
    if actual:
        status["resources"] = {"requests": {"cpu": actual}}
    if condition:
        status["conditions"] = [resize_pending(condition)]
    return _p(R("c"), resources={"requests": {"cpu": spec_cpu}}, node="n1", status=status,
              overhead={"cpu": overhead} if overhead else None)


RESIZE += [
    ("pod-level: an increase pending counts the spec", _bound_pod_level("2", "1", "1"), 2000),
    ("pod-level: an increase infeasible counts what runs",
     _bound_pod_level("2", "1", "1", "Infeasible"), 1000),
    ("pod-level: a decrease not yet actuated counts what runs", _bound_pod_level("1", "1", "2"), 2000),
    ("pod-level: the overhead in the status is counted once",
     _bound_pod_level("1", "2500m", "2500m", overhead="500m"), 2500),
]


@pytest.mark.parametrize("pod, cpu", [c[1:] for c in RESIZE], ids=[c[0] for c in RESIZE])
def test_a_bound_pod_counts_for_the_largest_of_spec_allocated_and_actuated(pod, cpu):
    assert pod_requests(pod, use_status=True).cpu_milli == cpu


def test_a_pod_waiting_to_be_placed_counts_its_spec_whatever_its_status_says():
    pod = _bound("1", "3", "3")
    assert pod_requests(pod).cpu_milli == 1000  # upstream's PreFilter: PodResourcesOptions{}
    assert pod_requests(pod, use_status=True).cpu_milli == 3000


def _fit(cpu=0, memory=0, pods=1, other=()):
    return Resources(cpu, memory, pods, tuple(other))


# fit_test.go's situations: (wants, allocatable, requested on the node) -> the reason
FIT = [
    ("no resources requested always fits", _fit(), _fit(10, 20, 32), _fit(10, 20, 1), None),
    ("too much cpu requested fails", _fit(1), _fit(10, 20, 32), _fit(10, 0, 1), INSUFFICIENT_CPU),
    ("too much memory requested fails", _fit(0, 1), _fit(10, 20, 32), _fit(0, 20, 1),
     INSUFFICIENT_MEMORY),
    ("both fit", _fit(1, 1), _fit(10, 20, 32), _fit(5, 5, 1), None),
    ("memory over allocatable on the node, the pod asks cpu only: fits (1.20 refused)",
     _fit(1), _fit(10, 20, 32), _fit(5, 25, 1), None),
    ("cpu over allocatable, the pod asks memory only: fits (1.20 refused)",
     _fit(0, 1), _fit(10, 20, 32), _fit(11, 5, 1), None),
    ("ephemeral storage over allocatable, the pod asks cpu only: fits (1.20 refused)",
     _fit(1), _fit(10, 20, 32, (("ephemeral-storage", 5),)),
     _fit(1, 1, 1, (("ephemeral-storage", 6),)), None),
    ("ephemeral storage requested beyond what is left fails",
     _fit(0, 0, 1, (("ephemeral-storage", 2),)), _fit(10, 20, 32, (("ephemeral-storage", 5),)),
     _fit(0, 0, 1, (("ephemeral-storage", 4),)), INSUFFICIENT_EPHEMERAL_STORAGE),
    ("an extended resource over allocatable, the pod asks cpu only: fits",
     _fit(1), _fit(10, 20, 32, (("example.com/foo", 3),)), _fit(0, 0, 1, (("example.com/foo", 5),)),
     None),
    ("an extended resource requested beyond what is left fails",
     _fit(0, 0, 1, (("example.com/foo", 2),)), _fit(10, 20, 32, (("example.com/foo", 3),)),
     _fit(0, 0, 1, (("example.com/foo", 2),)), "Insufficient example.com/foo"),
    ("an extended resource the node does not list fails",
     _fit(0, 0, 1, (("example.com/bar", 1),)), _fit(10, 20, 32), _fit(), "Insufficient example.com/bar"),
    ("the pod count is always compared", _fit(), _fit(10, 20, 1), _fit(0, 0, 1), TOO_MANY_PODS),
    ("the Mthreads resources are the cards' to count", _fit(0, 0, 1, (("mthreads.com/vgpu", 1),)),
     _fit(10, 20, 32), _fit(), None),
]


@pytest.mark.parametrize("wants, allocatable, requested, reason", [c[1:] for c in FIT],
                         ids=[c[0] for c in FIT])
def test_node_resources_fit_compares_only_what_the_pod_requests(wants, allocatable, requested, reason):
    assert resources_reason(wants, allocatable, requested, ("mthreads.com/vgpu",)) == reason


PORT = {"containerPort": 8081, "hostPort": 8081}
PORTS = [
    ("an app container's host port", _p(R("a", ports=[PORT])), (("0.0.0.0", "TCP", 8081),)),
    ("a sidecar's host port counts (1.34, and 1.33's patches)",
     _p(R("a"), init=(R("s", sidecar=True, ports=[PORT]),)), (("0.0.0.0", "TCP", 8081),)),
    ("a regular init container's host port does not", _p(R("a"), init=(R("i", ports=[PORT]),)), ()),
    ("a port without a host port does not", _p(R("a", ports=[{"containerPort": 80}])), ()),
]


@pytest.mark.parametrize("pod, ports", [c[1:] for c in PORTS], ids=[c[0] for c in PORTS])
def test_node_ports_reads_app_containers_and_sidecars(pod, ports):
    assert host_ports(pod) == ports


VGPU = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"}
NAMES = ("mthreads.com/vgpu", "mthreads.com/sgpu-memory", "mthreads.com/sgpu-core")
DEVICES = [
    ("app containers summed", _p(R("a", other=VGPU), R("b", other=VGPU)), (2, 16, 0)),
    ("a regular init container: the largest", _p(R("a", other=VGPU), init=(R("i", other=VGPU),)),
     (1, 8, 0)),
    ("a sidecar adds, as the kubelet admits it",
     _p(R("a", other=VGPU), init=(R("s", other=VGPU, sidecar=True),)), (2, 16, 0)),
]


@pytest.mark.parametrize("pod, devices", [c[1:] for c in DEVICES], ids=[c[0] for c in DEVICES])
def test_device_requests_as_the_kubelet_admits_them(pod, devices):
    assert tuple(device_requests(pod, NAMES)) == devices


def _raw_pod(spec: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "uid": "u-bad"},
            "spec": {"containers": [R("a", "1")], **spec}}


BAD = [
    ("pod-level resources not a mapping", _raw_pod({"resources": "2"}),
     "spec.resources is not a mapping: '2'"),
    ("pod-level requests a list", _raw_pod({"resources": {"requests": ["cpu"]}}),
     "spec.resources.requests is not a mapping: a list"),
    ("a restartPolicy that is no string",
     _raw_pod({"initContainers": [dict(R("s", "1"), restartPolicy=True)]}),
     "spec.initContainers[0].restartPolicy is not a string: True"),
    ("a restartPolicy that is a mapping",
     _raw_pod({"initContainers": [dict(R("s", "1"), restartPolicy={"always": 1})]}),
     "spec.initContainers[0].restartPolicy is not a string: a mapping"),
    ("a container's resources a text", _raw_pod({"initContainers": [dict(R("s"), resources="1")]}),
     "spec.initContainers[0].resources is not a mapping: '1'"),
]


@pytest.mark.parametrize("pod, reason", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_field_of_the_wrong_shape_is_every_nodes_reason_naming_it(pod, reason):
    assert requests_problem(pod) == reason
    pod_requests(pod), pod_requests(pod, use_status=True)  # read as absent, never raising
    cache = SchedulerCache(MthreadsConfig())
    cache.apply("node", "RESET", [mt_node("n1"), mt_node("n2")])
    assert cache.read(lambda s: node_reasons(pod, s)) == {"n1": reason, "n2": reason}


def test_a_sidecar_or_pod_level_resources_make_another_shape():
    plain_init = pod_requesting(R("a", "1"), init=(R("i", "2"),))
    sidecar = pod_requesting(R("a", "1"), init=(R("i", "2", sidecar=True),))
    pod_level = pod_requesting(R("a", "1"), init=(R("i", "2"),), resources={"requests": {"cpu": "4"}})
    shapes = {shape_of(plain_init), shape_of(sidecar), shape_of(pod_level)}
    assert None not in shapes and len(shapes) == 3
    assert shape_of(_raw_pod({"resources": "2"})) is None
