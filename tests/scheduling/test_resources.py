"""Quantities as kube-scheduler counts them (scheduling/resources.py): cpu in millicores rounded
up, everything else in whole units rounded up, anything unreadable or not positive 0; the same
answer for a text read the first time and read again (the texts' answers are kept)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from webhook.scheduling.resources import cpu_milli, pod_requests, whole_units

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
