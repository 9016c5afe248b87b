"""Quantities as kube-scheduler counts them (scheduling/resources.py, scheduling/quantity.py): cpu
in millicores rounded up, everything else in whole units rounded up (allocatable down), anything
unreadable or not positive 0, anything past int64 2^63-1 as Value and MilliValue saturate; the
same answer for a text read the first time and read again (the texts' answers are kept); and
every text read in bounded time, whatever its exponent or length (issue 46, finding 1)."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from tests.builders import mt_node
from webhook.scheduling.resources import (
    _whole_or_zero,
    cpu_milli,
    device_allocatable,
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
