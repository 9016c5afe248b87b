"""The extender process's own settings (webhook/extender/main.py)."""

from __future__ import annotations

import asyncio
import gc
import threading

from webhook.extender.main import _freeze_when_listed


def test_what_the_first_list_built_is_frozen_out_of_the_collections_once_listed():
    listed = threading.Event()
    wait_ready = lambda timeout: listed.wait(min(timeout, 0.2))  # noqa: E731
    gc.unfreeze()

    async def scenario():
        task = asyncio.ensure_future(_freeze_when_listed(wait_ready))
        await asyncio.sleep(0.5)
        frozen_before = gc.get_freeze_count()
        listed.set()
        await asyncio.wait_for(task, 5)
        return frozen_before, gc.get_freeze_count()

    try:
        before, after = asyncio.run(scenario())
    finally:
        gc.unfreeze()
    assert before == 0 and after > 0
