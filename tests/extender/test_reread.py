"""The extender re-reads a pod whose binding outcome is unknown on the binding cycle's period
(scheduling/binding_cycle.py: every second, as the allocator), from its `tend` loop."""

from __future__ import annotations

import asyncio

from tests.builders import sched_pod, whole
from webhook.scheduling.binding_cycle import REREAD_EVERY
from webhook.scheduling.cache import Phase

from .messages import bind_args, pending


def test_an_unknown_outcome_is_read_again_within_the_period(setup):
    client, cache, api = setup
    p = pending(api, sched_pod(whole(1, 96)))
    uid = p["metadata"]["uid"]
    api.raise_error = True  # the write's answer is lost
    assert "outcome unknown" in client.post("/bind", json=bind_args(p, "s4")).get_json()["Error"]
    assert cache.core.phase(uid) is Phase.UNCERTAIN and not cache.core.card("s4-mthreads-0").idle
    api.raise_error = False  # the write did not happen: the read finds the pod pending
    before = len(api.calls)

    async def tend_for(seconds: float) -> None:
        task = asyncio.ensure_future(client.app.ext.tend())
        await asyncio.sleep(seconds)
        task.cancel()

    client.loop.run_until_complete(tend_for(REREAD_EVERY + 0.6))  # tend's first round: 0.5 s
    reads = [c for c in api.calls[before:] if c.method == "GET"
             and c.path.endswith("/" + p["metadata"]["name"])]
    assert len(reads) == 1  # read again once: it answered, nothing is left in doubt
    assert cache.core.phase(uid) is None and cache.core.card("s4-mthreads-0").idle
