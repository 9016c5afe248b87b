"""The extender's GET /metrics: HAMi's families from its own cache, fed as its watch feeds it."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.builders import mt_node, slice_
from tests.builders import sched_pod as pod
from tests.extender.messages import extender_client
from tests.harness.invariants import ALLOCATED
from webhook.extender.cache import Cache
from webhook.model.config import Config


def scrape(client) -> dict[str, list]:
    reply = client.get("/metrics")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/plain")
    return {f.name: f.samples for f in text_string_to_metric_families(reply.data.decode())}


def test_extender_exports_hamis_families_and_forgets_deleted_pods():
    cache = Cache(Config())
    cache.apply("node", "RESET", [mt_node("s4", cards=2)])
    p = pod(slice_(32, 8), name="a", namespace="team", node="s4", phase="Running",
            annotations={ALLOCATED: "s4-mthreads-1,Mthreads,16384,8:;"})
    cache.apply("pod", "RESET", [p])
    client = extender_client(cache, config=Config())
    m = scrape(client)
    used = {s.labels["device_uuid"]: s.value for s in m["hami_gpu_memory_allocated_bytes"]}
    assert used == {"s4-mthreads-0": 0, "s4-mthreads-1": 16384 * 1024 * 1024}
    ctr, = m["hami_vgpu_core_allocated_ratio"]
    assert ctr.labels["pod"] == "a" and ctr.value == 8
    cache.apply("pod", "DELETED", p)
    m = scrape(client)
    assert m["hami_vgpu_core_allocated_ratio"] == []
    assert {s.value for s in m["hami_gpu_memory_allocated_bytes"]} == {0}
