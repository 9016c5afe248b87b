"""HAMi's metrics and the pending gauges from a live allocator, scraped while pods come and go
on the real API server (pods in the form the webhook mutates them into)."""

from __future__ import annotations

import kubernetes.client as k
import pytest

from tests.builders import slice_
from tests.harness.invariants import ALLOCATED
from tests.harness.kube import end_pod
from tests.harness.wait import wait_for

from .cluster import create, pod, samples, scrape, wait_bound, wait_unschedulable

pytestmark = pytest.mark.cluster

GIB = 1024 ** 3


def test_hami_metrics_follow_pods_placed_and_deleted(admin, fleet, namespace, start_allocator):
    s4, = fleet(2, 96)
    alloc = start_allocator()
    alloc.wait_healthy()
    a = create(admin, namespace, pod(slice_(32, 8, name="train"), name="a"))
    b = create(admin, namespace, pod(slice_(16, 4, name="x"), slice_(8, 2, name="y"), name="b"))
    big = create(admin, namespace, pod(slice_(160, 16, name="huge"), name="big"))  # no S5000 here
    cards = {n: wait_bound(admin, namespace, n)["metadata"]["annotations"][ALLOCATED].split(",")[0]
             for n in (a, b)}
    wait_unschedulable(admin, namespace, big)

    def placed():
        m = scrape(alloc.metrics_url)
        return m if len(samples(m, "hami_vgpu_memory_allocated_bytes", namespace=namespace)) == 3 \
            and samples(m, "mthreads_allocator_pending_pods", reason="CardTypeMismatch") else None
    m = wait_for(placed, 30, what="HAMi series of three containers")
    for card in (f"{s4}-mthreads-0", f"{s4}-mthreads-1"):
        limit, = samples(m, "hami_gpu_memory_limit_bytes", node=s4, device_uuid=card)
        assert limit.value == 48 * GIB
        assert limit.labels == {"node": s4, "device_uuid": card, "device_index": card[-1],
                                "device_type": "Mthreads", "zone": "vGPU"}
        assert samples(m, "hami_gpu_core_limit_ratio", device_uuid=card)[0].value == 16
    want = {f"{s4}-mthreads-0": [0, 0, 0], f"{s4}-mthreads-1": [0, 0, 0]}  # GiB, cores, containers
    want[cards[a]] = [x + y for x, y in zip(want[cards[a]], [16, 8, 1])]
    want[cards[b]] = [x + y for x, y in zip(want[cards[b]], [12, 6, 2])]
    for card, (gib, cores, containers) in want.items():
        assert samples(m, "hami_gpu_memory_allocated_bytes", device_uuid=card,
                       device_cores="16")[0].value == gib * GIB
        assert samples(m, "hami_gpu_core_allocated_ratio", device_uuid=card)[0].value == cores
        assert samples(m, "hami_gpu_shared_count", device_uuid=card)[0].value == containers
        assert samples(m, "hami_node_gpu_memory_allocated_ratio", device_uuid=card)[0].value == gib / 48
        assert samples(m, "hami_node_gpu_overview", device_uuid=card,
                       device_memory_limit="49152")[0].value == gib * GIB
    y, = samples(m, "hami_vgpu_memory_allocated_bytes", namespace=namespace, pod=b, container_index="1")
    assert y.labels == {"namespace": namespace, "node": s4, "pod": b, "container_index": "1",
                        "device_uuid": cards[b], "zone": "vGPU"}
    assert y.value == 4 * GIB
    assert samples(m, "hami_vgpu_core_allocated_ratio", pod=b, container_index="1")[0].value == 2
    # 160 units is valid for MTT S5000 only: the main reason is the model
    assert samples(m, "mthreads_allocator_pending_pods", reason="CardTypeMismatch")[0].value >= 1
    waits, = samples(m, "mthreads_allocator_pending_pod_created_timestamp_seconds", pod=big)
    assert waits.labels == {"namespace": namespace, "pod": big, "reason": "CardTypeMismatch"}

    core = k.CoreV1Api(admin)
    core.delete_namespaced_pod(b, namespace, grace_period_seconds=0)
    core.delete_namespaced_pod(big, namespace, grace_period_seconds=0)

    def gone():
        m = scrape(alloc.metrics_url)
        return m if not samples(m, "hami_vgpu_memory_allocated_bytes", pod=b) \
            and not samples(m, "mthreads_allocator_pending_pod_created_timestamp_seconds", pod=big) else None
    m = wait_for(gone, 30, what="the deleted pods' series gone")
    assert samples(m, "hami_gpu_shared_count", device_uuid=cards[b])[0].value == \
        (1 if cards[b] == cards[a] else 0)
    assert len(samples(m, "hami_vgpu_memory_allocated_bytes", namespace=namespace)) == 1

    # a pod that ends (as the kubelet reports it) holds nothing any more
    end_pod(admin, namespace, a)

    def ended():
        m = scrape(alloc.metrics_url)
        return m if not samples(m, "hami_vgpu_memory_allocated_bytes", namespace=namespace) else None
    m = wait_for(ended, 30, what="the ended pod's series gone")
    assert samples(m, "hami_gpu_shared_count", device_uuid=cards[a])[0].value == 0
    assert samples(m, "hami_gpu_memory_allocated_bytes", device_uuid=cards[a])[0].value == 0
