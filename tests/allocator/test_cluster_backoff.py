"""A pod that never fits, while other pods come and go on the real API server: the allocator
decides it again no more often than its backoff allows (1 s doubling to 10 s, issue 32), not on
every change. Its decisions are counted through
the allocator's own failure counter: only that pod has a node affinity, so only its decisions
count `node(s) didn't match Pod's node affinity/selector`.

Updates of the pod never shorten its backoff (issue 46, finding 5): a user who patches an
annotation every 100 ms gets no decision per patch; an update that may make it fit (a label)
has it decided when its backoff ends, with nothing else changing."""

from __future__ import annotations

import time
import urllib.request

import kubernetes.client as k
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import sched_pod as pod
from tests.builders import slice_
from tests.harness.kube import bound_pod
from tests.harness.wait import wait_for
from webhook.scheduling.queue import (
    POD_INITIAL_BACKOFF,
    POD_MAX_BACKOFF,
    RETRY_BACKSTOP,
    backoff_seconds,
)
from webhook.scheduling.reasons import AFFINITY

from .test_cluster import create

pytestmark = pytest.mark.cluster

WINDOW = 12.0  # seconds of churn: backoffs of 1, 2, 4 and 8 s allow 4 decisions in it
PATCHING = 8.0  # seconds of patches of the pod, one every 100 ms


def decisions(alloc) -> float:
    """How often the allocator found that no node matched a pod's node affinity."""
    text = urllib.request.urlopen(alloc.metrics_url + "/metrics", timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "mthreads_allocator_failures_total" and s.labels.get("reason") == AFFINITY:
                return s.value
    return 0.0


def allowed(seconds: float) -> int:
    """The most decisions of one pod the backoff allows within `seconds` of its first."""
    tries, at = 1, 0.0
    while at + backoff_seconds(tries, POD_INITIAL_BACKOFF, POD_MAX_BACKOFF) <= seconds:
        at += backoff_seconds(tries, POD_INITIAL_BACKOFF, POD_MAX_BACKOFF)
        tries += 1
    return tries


def test_a_pod_that_never_fits_is_retried_after_its_backoff_not_on_every_change_nor_update(
        admin, fleet, namespace, start_allocator):
    fleet(2, 96, count=2)
    core = k.CoreV1Api(admin)
    alloc = start_allocator()
    alloc.wait_leading()
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{
            "key": "kubernetes.io/hostname", "operator": "In",
            "values": [f"nowhere-{i}" for i in range(100)]}]}]}}}
    create(admin, namespace, pod(slice_(8, name="a"), name="never", spec={"affinity": affinity}))
    created = time.monotonic()
    wait_for(lambda: decisions(alloc) >= 1, 30, alive=alloc,
             what="the first decision of the pod that never fits")

    def churn_one(i: int) -> None:
        """A pod that fits: created, bound, deleted (the deletion frees room: a change)."""
        name = f"churn-{i}"
        create(admin, namespace, pod(slice_(8, name="a"), name=name))
        wait_for(lambda: bound_pod(admin, namespace, name), 30, interval=0.05,
                 what=f"{name} bound", alive=alloc)
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    churned = 0
    while time.monotonic() - created < WINDOW:
        churn_one(churned)
        churned += 1
    tried = decisions(alloc)
    elapsed = time.monotonic() - created
    assert churned >= 10, f"only {churned} changes in {WINDOW:.0f} s"
    # Retried after its backoff (the changes do retry it then), but no more often: on every
    # change it would have been decided about once per churned pod.
    assert 2 <= tried <= allowed(elapsed), \
        f"decided {tried:.0f} times in {elapsed:.1f} s while {churned} pods came and went; " \
        f"the backoff allows {allowed(elapsed)}"

    # Patches of an annotation no decision reads, every 100 ms: the backoff holds (it was 8 s
    # or more by now, so 8 s of patches allow 2 decisions at most).
    before_patches = decisions(alloc)
    patches, patching = 0, time.monotonic()
    while time.monotonic() - patching < PATCHING:
        core.patch_namespaced_pod("never", namespace,
                                  {"metadata": {"annotations": {"example.com/touched": str(patches)}}})
        patches += 1
        time.sleep(0.1)
    during = decisions(alloc) - before_patches
    assert during <= 2, f"decided {during:.0f} times during {patches} patches in {PATCHING:.0f} s"

    # A label may make it fit (inter-pod affinity and spread read it): right after a decision,
    # a label; the next decision comes when its backoff ends, not sooner, though nothing else
    # changes (not after the {RETRY_BACKSTOP} s backstop).
    seen = decisions(alloc)
    wait_for(lambda: decisions(alloc) > seen, 3 * POD_MAX_BACKOFF, interval=0.05,
             what="the pod's next decision", alive=alloc)
    decided = decisions(alloc)
    core.patch_namespaced_pod("never", namespace, {"metadata": {"labels": {"app": "web"}}})
    patched = time.monotonic()
    wait_for(lambda: decisions(alloc) > decided, RETRY_BACKSTOP * 2, interval=0.05,
             what="a decision after the pod's label", alive=alloc)
    waited = time.monotonic() - patched
    backoff = backoff_seconds(int(decided), POD_INITIAL_BACKOFF, POD_MAX_BACKOFF)
    print(f"{churned} pods churned; the pod decided {tried:.0f} times in {elapsed:.1f} s; "
          f"{during:.0f} times during {patches} patches; again {waited:.2f} s after its label "
          f"(its backoff {backoff:.0f} s)")
    assert backoff - 1.0 <= waited < RETRY_BACKSTOP - 5, \
        f"decided {waited:.1f} s after its label; its backoff was {backoff:.0f} s"
    assert "Traceback" not in alloc.log()
