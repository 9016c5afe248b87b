"""The one polling helper of the tests: bounded, generous waits instead of sleeps."""

from __future__ import annotations

import time
from typing import Callable


def _exit_report(proc) -> str | None:
    """None while `proc` (a subprocess.Popen, or a LoggedProcess-like object with running())
    runs; else how it ended, with the tail of its log when it keeps one."""
    if hasattr(proc, "running"):
        if proc.running():
            return None
        code = proc.proc.returncode if getattr(proc, "proc", None) is not None else None
    else:
        code = proc.poll()
        if code is None:
            return None
    tail = proc.tail() if hasattr(proc, "tail") else ""
    return f"exited with code {code}" + (f":\n{tail}" if tail else "")


def _text(what) -> str:
    return what() if callable(what) else what


def wait_for(predicate, timeout: float, interval: float = 0.2,
             what: str | Callable[[], str] = "condition", alive=None,
             retry_on: tuple[type[BaseException], ...] = ()):
    """Call `predicate` until it returns something true (returned) or `timeout` seconds pass
    (AssertionError naming `what`; a callable `what` is asked at the end, so that the message
    can carry what the last try saw).

    alive: a process the condition depends on (a Popen or a LoggedProcess); its exit ends the
    wait at once, with its log's tail, instead of after the whole timeout.
    retry_on: exception types `predicate` may raise meaning "not yet" (a server not listening
    yet, an authorizer not caught up); at the timeout the last one is chained to the error."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if alive is not None and (ended := _exit_report(alive)) is not None:
            raise AssertionError(f"waiting for {_text(what)}, the process {ended}")
        try:
            value = predicate()
        except retry_on as e:
            value, last = None, e
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {_text(what)}") from last
        time.sleep(interval)


def time_until(predicate, timeout: float, interval: float = 0.05,
               what: str | Callable[[], str] = "condition", **kw) -> float:
    """wait_for, returning the seconds it took (for a test that bounds how soon a change is seen)."""
    started = time.monotonic()
    wait_for(predicate, timeout, interval, what, **kw)
    return time.monotonic() - started
