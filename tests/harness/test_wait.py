"""The tests' one polling helper (tests/harness/wait.py): what a wait returns and how it fails."""

import itertools

import pytest

from tests.harness.wait import time_until, wait_for


class Stopped:
    """Stands for a LoggedProcess that has exited (no process is started here)."""

    class proc:
        returncode = 3

    def running(self) -> bool:
        return False

    def tail(self) -> str:
        return "the last log line"


def test_the_first_true_value_is_returned():
    answers = iter([None, 0, {"spec": {"nodeName": "n1"}}])
    assert wait_for(lambda: next(answers), 5, 0.01) == {"spec": {"nodeName": "n1"}}


def test_a_timeout_names_what_was_waited_for_as_the_last_try_saw_it():
    tries = itertools.count(1)
    seen = []
    with pytest.raises(AssertionError, match=r"timed out after 0.1s waiting for the pod bound \(try \d+\)"):
        wait_for(lambda: seen.append(next(tries)), 0.1, 0.01,
                 what=lambda: f"the pod bound (try {seen[-1]})")


def test_retried_exceptions_mean_not_yet_and_the_last_is_chained():
    calls = iter([ConnectionRefusedError(), ConnectionResetError(), "ready"])

    def probe():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_for(probe, 5, 0.01, retry_on=(OSError,)) == "ready"
    with pytest.raises(AssertionError) as failed:
        wait_for(lambda: 1 / 0, 0.05, 0.01, retry_on=(ZeroDivisionError,))
    assert isinstance(failed.value.__cause__, ZeroDivisionError)


def test_other_exceptions_are_not_retried():
    with pytest.raises(KeyError):
        wait_for(lambda: {}["missing"], 5, 0.01, retry_on=(OSError,))


def test_an_exited_process_ends_the_wait_at_once_with_its_log():
    with pytest.raises(AssertionError, match="waiting for /readyz, the process exited with code 3:\n"
                                             "the last log line"):
        wait_for(lambda: False, 60, 0.01, what="/readyz", alive=Stopped())


def test_time_until_returns_the_seconds_it_took():
    answers = iter([False, False, True])
    took = time_until(lambda: next(answers), 5, 0.05)
    assert 0.1 <= took < 5
