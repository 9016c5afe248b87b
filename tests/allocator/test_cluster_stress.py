"""Hundreds of random pods while the allocator is restarted and SIGKILLed: checked by an
independent reader of the annotations (tests/harness/invariants.py), never by webhook code."""

from __future__ import annotations

import random
import time

import kubernetes.client as k
import pytest

from tests.builders import sched_pod as pod
from tests.builders import slice_, whole
from tests.harness.invariants import check as check_capacity
from tests.harness.kube import list_pods
from tests.harness.wait import wait_for

from .test_cluster import create

pytestmark = pytest.mark.cluster

SEED = 20240607
PODS = 240


def random_pod(rng: random.Random, i: int) -> dict:
    r = rng.random()
    if r < 0.08:
        return pod(whole(rng.choice([1, 1, 2]), 96, name="w"), name=f"r{i}")
    if r < 0.12:
        return pod(whole(1, 160, name="w"), name=f"r{i}",
                   annotations={"mthreads.com/card-model": "MTT-S5000"})
    memory = rng.choice([2, 4, 8, 8, 16, 16, 32, 64, 96, 128])
    cores = rng.choice([None, 1, 2, 4, 8])
    if rng.random() < 0.15:  # a pod with two slices on one card
        return pod(slice_(min(memory, 32), cores, name="a"), slice_(4, 1, name="b"), name=f"r{i}")
    return pod(slice_(memory, cores, name="a"), name=f"r{i}")


def test_random_pods_with_restarts_and_kills(admin, fleet, namespace, start_allocator):
    rng = random.Random(SEED)
    caps = {}
    for name in fleet(4, 96, count=3):
        caps.update({f"{name}-mthreads-{i}": 96 * 512 for i in range(4)})
    for name in fleet(4, 160, count=3):
        caps.update({f"{name}-mthreads-{i}": 160 * 512 for i in range(4)})
    core = k.CoreV1Api(admin)
    alloc = start_allocator()
    ever_bound: set[str] = set()
    checks = 0
    t0 = time.monotonic()

    def check() -> list[dict]:
        nonlocal checks
        pods = list_pods(admin, namespace)
        check_capacity(pods, caps)
        checks += 1
        ever_bound.update(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))
        return pods

    kill_at = sorted(rng.sample(range(20, PODS - 20), 3))  # SIGKILL, SIGTERM, SIGKILL
    for i in range(PODS):
        create(admin, namespace, random_pod(rng, i))
        if i in kill_at:
            check()
            if kill_at.index(i) == 1:
                alloc.wait_healthy()
                assert alloc.stop() == 0  # releases the lease: the next one starts at once
            else:
                alloc.kill()  # the lease stays held until it expires (15 s)
            alloc = start_allocator()
            # let it take the lease, so that the next kill hits a leader in the middle of work
            alloc.wait_leading()
        if i % 40 == 39:
            check()
    # free room until every pod has been bound once
    bound_before: int | None = None  # ever_bound's size at the previous look, 2 s before

    def all_bound_once() -> bool:
        nonlocal bound_before
        pods = check()
        if not [p for p in pods if not p["spec"].get("nodeName")]:
            return True
        if len(ever_bound) == bound_before:  # settled: delete a batch of bound pods
            victims = [p for p in pods if p["spec"].get("nodeName")]
            rng.shuffle(victims)
            for p in victims[:25]:
                core.delete_namespaced_pod(p["metadata"]["name"], namespace, grace_period_seconds=0)
        bound_before = len(ever_bound)
        return False

    wait_for(all_bound_once, 200, 2, what=lambda: f"{PODS - len(ever_bound)} pods never bound")
    elapsed = time.monotonic() - t0
    assert len(ever_bound) == PODS, f"{PODS - len(ever_bound)} pods never bound"
    print(f"{PODS} pods, {checks} capacity checks, all bound in {elapsed:.0f}s")
    assert "Traceback" not in alloc.log()
