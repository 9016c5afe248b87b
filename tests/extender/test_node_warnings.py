"""The extender warns on a node whose card annotations had entries ignored: one Warning event
per change, written by its `tend` loop (a fake API records it)."""

from __future__ import annotations

import asyncio

from tests.builders import mt_node
from tests.harness.fake_api import FakeApi
from webhook.extender.cache import Cache
from webhook.extender.main import build
from webhook.extender.verbs import Extender
from webhook.scheduling.node_annotations import WARNING_REASON

from .messages import CONFIG


def events(api: FakeApi) -> list[dict]:
    return [c.body for c in api.calls if c.method == "POST" and c.path.endswith("/events")]


async def tend_for(ext: Extender, seconds: float) -> None:
    task = asyncio.ensure_future(ext.tend())
    await asyncio.sleep(seconds)
    task.cancel()


def test_one_warning_event_per_change_on_the_node():
    api, cache = FakeApi(), Cache(CONFIG)
    ext = Extender(CONFIG, cache, api)
    node = mt_node("s4", 2, annotations={"hami.io/device-cordon": "s4-mthreads-0, s4-mthreads-9,x"})
    node["metadata"]["uid"] = "uid-s4"
    cache.apply("node", "RESET", [node])
    cache.apply("node", "MODIFIED", node)  # a heartbeat
    asyncio.run(tend_for(ext, 0.7))
    (body,) = events(api)
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "s4", "uid": "uid-s4"}
    assert body["metadata"]["namespace"] == "default" and body["type"] == "Warning"
    assert body["reason"] == WARNING_REASON and body["source"] == {"component": "hami-scheduler"}
    assert body["message"] == ("hami.io/device-cordon: ignored 'x' (not a card of s4: "
                               "<node>-mthreads-<index>)")
    # the valid entries count: s4-mthreads-0 (trimmed) and s4-mthreads-9 (a card that may appear)
    assert cache.core.read(lambda s: s.nodes["s4"].cards.settings.cordoned) == {
        "s4-mthreads-0", "s4-mthreads-9"}


def test_a_limit_of_5000_digits_is_told_and_counted_and_the_node_watch_goes_on():
    """Issue 46, finding 7: int() of the annotation raised ValueError in the node watch."""
    api = FakeApi()
    app, cache = build(CONFIG, api)  # the extender's app, its metrics page over this cache
    counter = "mthreads_node_annotations_ignored_total{annotation=%s}"
    node = mt_node("s4", 2, annotations={"mthreads.com/max-instances-per-card": "9" * 5000})
    node["metadata"]["uid"] = "uid-s4"
    cache.apply("node", "RESET", [node, mt_node("s5", 2)])
    asyncio.run(tend_for(app.ext, 0.7))
    (body,) = events(api)
    assert body["reason"] == WARNING_REASON and body["message"].startswith(
        "mthreads.com/max-instances-per-card: ignored '999") and len(body["message"]) < 300
    assert cache.core.read(lambda s: sorted((n, i.cards.settings.max_instances)
                                            for n, i in s.nodes.items())) == [("s4", 16), ("s5", 16)]
    page = app.metrics()[0]
    assert (counter % '"mthreads.com/max-instances-per-card"').encode() + b" 1.0" in page
    assert (counter % '"hami.io/device-cordon"').encode() + b" 0.0" in page  # there from the start
