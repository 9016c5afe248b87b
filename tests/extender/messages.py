"""The extender's messages as kube-scheduler 1.20 sends them, and a cache fed by hand, for the
handler tests (the Go structs have no json tags: the keys are the Go field names)."""

from __future__ import annotations

import json
from typing import NamedTuple

from tests.builders import mt_node, sched_pod, slice_
from tests.harness.app_client import AppClient
from tests.harness.fake_api import AsyncFakeApi, FakeApi
from webhook.extender.app import READY_WAIT
from webhook.extender.cache import WAITING, Cache
from webhook.extender.main import app_over
from webhook.model.config import parse_config
from webhook.scheduling.cache import NAMESPACE, STORAGE_KINDS

CONFIG = parse_config({"devices": {"mthreads": {"memoryPerCard": [96, 160]}}})


class HandlerSetup(NamedTuple):
    client: AppClient  # of the extender app
    cache: Cache  # with nodes s4 (2 S4000 cards) and s5 (2 S5000)
    api: FakeApi


def handler_setup() -> HandlerSetup:
    """The extender app on a cache fed by hand, binding through a fake API."""
    api = FakeApi()
    cache = Cache(CONFIG)
    nodes = [mt_node("s4", cards=2, units=96), mt_node("s5", cards=2, units=160)]
    cache.apply("node", "RESET", nodes)
    cache.apply("pod", "RESET", [])
    cache.apply(WAITING, "RESET", [])
    no_storage(cache)
    return HandlerSetup(extender_client(cache, api), cache, api)


def no_storage(cache: Cache) -> None:
    """The watches of claims, volumes, classes and namespaces listed, empty."""
    for kind in STORAGE_KINDS + (NAMESPACE,):
        cache.apply(kind, "RESET", [])


def extender_client(cache: Cache, api: FakeApi | None = None, config=CONFIG,
                    ready_wait: float = READY_WAIT) -> AppClient:
    """A client of the extender app (app.py) over `cache`, binding through `api`."""
    return AppClient(app_over(config, cache, AsyncFakeApi(api or FakeApi()), ready_wait))


def pending(api, p):
    """A pending pod, as the API server would return it (the extender's watch shows bound
    pods only; `cache` is the one it would not reach)."""
    api.pods[(p["metadata"]["namespace"], p["metadata"]["name"])] = json.loads(json.dumps(p))
    return p


def args(p, names=("s4", "s5")):
    return {"Pod": p, "Nodes": None, "NodeNames": list(names)}


def bind_args(p, node):
    m = p["metadata"]
    return {"PodName": m["name"], "PodNamespace": m["namespace"], "PodUID": m["uid"], "Node": node}


def add_busy_node(client, cache, api, busy: str) -> None:
    """A second S4000 node s4b (2 cards), and a 64-unit slice bound through the extender on
    `busy` (s4 or s4b)."""
    cache.apply("node", "ADDED", mt_node("s4b", cards=2, units=96))
    p = pending(api, sched_pod(slice_(64, 8)))
    assert client.post("/bind", json=bind_args(p, busy)).get_json() == {"Error": ""}
