"""The one polling helper of the tests: bounded, generous waits instead of sleeps."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Call `predicate` until it returns something true (returned) or `timeout` seconds pass
    (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
