"""The one binding cycle of both front-ends (webhook/scheduling/binding_cycle.py), on plain
data: each outcome of a write and what the cache holds after it, and each answer of the
re-read of an unknown outcome (no API, no threads: the re-read is a recording function)."""

import copy

import pytest

from tests.builders import sched_pod, slice_
from tests.scheduling.test_cache import assumed, bound, cache, used
from webhook.scheduling import binding_cycle
from webhook.scheduling.binding_cycle import REREAD_EVERY, BindingCycle, Outcome
from webhook.scheduling.cache import Phase


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reads:
    """The front-end's re-read: records what it was asked to read, returns a token."""

    def __init__(self):
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, uid: str, namespace: str, name: str) -> str:
        self.asked.append((uid, namespace, name))
        return f"reading {name}"


def setup():
    c = cache()
    p = sched_pod(slice_(16, 4))
    share = assumed(c, p)
    return c, BindingCycle(c, Clock()), p, share


HELD, FREE = (8192, 4), (0, 0)


@pytest.mark.parametrize("status, outcome, phase, held, read_at_once", [
    (201, Outcome.BOUND, Phase.WRITTEN, HELD, False),  # written: counted till the watch shows it
    (200, Outcome.BOUND, Phase.WRITTEN, HELD, False),
    (None, Outcome.UNKNOWN, Phase.UNCERTAIN, HELD, False),  # no answer: held, read when due
    (409, Outcome.READ_NOW, Phase.UNCERTAIN, HELD, True),  # bound by someone else: read now
    (404, Outcome.READ_NOW, Phase.UNCERTAIN, HELD, True),  # gone: read now
    (500, Outcome.DROPPED, None, FREE, False),  # refused, nothing written: the pod waits again
    (403, Outcome.DROPPED, None, FREE, False),
    (422, Outcome.DROPPED, None, FREE, False),
    (0, Outcome.DROPPED, None, FREE, False),  # the binder did not send it (the lease was lost)
])
def test_each_outcome_and_what_the_cache_holds_after(status, outcome, phase, held, read_at_once):
    c, cycle, p, share = setup()
    uid, name = p["metadata"]["uid"], p["metadata"]["name"]
    reads = Reads()
    told, reading = cycle.outcome(share, "default", name, status, reads)
    assert told is outcome and c.phase(uid) is phase and used(c) == held
    assert reads.asked == ([(uid, "default", name)] if read_at_once else [])
    assert reading == (f"reading {name}" if read_at_once else None)
    assert (uid in cycle.reading) == read_at_once


@pytest.mark.parametrize("status, outcome", [
    (409, Outcome.STALE), (404, Outcome.STALE), (500, Outcome.STALE), (0, Outcome.STALE),
    (201, Outcome.BOUND), (None, Outcome.UNKNOWN),
])
def test_an_outcome_after_the_watch_showed_the_pod_bound_keeps_the_real_share(status, outcome):
    c, cycle, p, share = setup()
    c.apply("pod", "MODIFIED", bound(p, 4096, 2))  # the watch first, other figures
    reads = Reads()
    assert cycle.outcome(share, "default", p["metadata"]["name"], status, reads)[0] is outcome
    assert used(c) == (4096, 2) and not c.assumed() and reads.asked == []


def test_not_written_gives_the_cards_back():
    c, cycle, p, share = setup()
    assert cycle.not_written(share) and c.card("n0-mthreads-0").idle and not c.assumed()


def _elsewhere(p: dict) -> dict:
    """Bound by another scheduler to the other card, other figures."""
    return bound(p, 4096, 2, card="n0-mthreads-1")


def _recreated(p: dict) -> dict:
    other = copy.deepcopy(p)
    other["metadata"]["uid"] = "another-uid"  # deleted, and made again under the same name
    return other


@pytest.mark.parametrize("answer, told, phase, cards", [
    # (status, the pod as read) -> what the cycle says, the pod's phase, (card 0, card 1) used
    (lambda p: (200, bound(p)), "bound", None, (HELD, FREE)),  # ours did happen
    (lambda p: (200, _elsewhere(p)), "bound", None, (FREE, (4096, 2))),  # bound elsewhere
    (lambda p: (404, None), "gone", None, (FREE, FREE)),
    (lambda p: (200, _recreated(p)), "gone", None, (FREE, FREE)),
    (lambda p: (200, p), "unbound", None, (FREE, FREE)),  # still pending: it waits again
    (lambda p: (0, None), "unknown", Phase.UNCERTAIN, (HELD, FREE)),  # not reached: held
    (lambda p: (500, None), "unknown", Phase.UNCERTAIN, (HELD, FREE)),
])
def test_the_reread_of_an_unknown_outcome(answer, told, phase, cards):
    c, cycle, p, share = setup()
    uid = p["metadata"]["uid"]
    cycle.outcome(share, "default", p["metadata"]["name"], None, Reads())
    reads = Reads()
    assert cycle.reread_due(reads) == [f"reading {p['metadata']['name']}"]
    assert cycle.read_answer(uid, *answer(p)) == told
    assert c.phase(uid) is phase and uid not in cycle.reading
    assert (used(c, "n0-mthreads-0"), used(c, "n0-mthreads-1")) == cards


def test_an_unknown_outcome_is_reread_every_period_one_read_at_a_time():
    c, cycle, p, share = setup()
    uid, name = p["metadata"]["uid"], p["metadata"]["name"]
    clock = cycle.clock
    assert isinstance(clock, Clock)
    cycle.outcome(share, "default", name, None, Reads())
    reads = Reads()
    assert len(cycle.reread_due(reads)) == 1  # due at once
    clock.now += REREAD_EVERY / 2
    assert cycle.read_answer(uid, 0, None) == "unknown"  # not reached: held
    assert cycle.reread_due(reads) == []  # half a period since that read began
    clock.now += REREAD_EVERY / 2
    assert len(cycle.reread_due(reads)) == 1  # a period since: read again
    clock.now += 10 * REREAD_EVERY
    assert cycle.reread_due(reads) == []  # that read is under way: not a second one
    assert reads.asked == [(uid, "default", name)] * 2


def test_the_period_is_one_second_for_both_front_ends():
    assert REREAD_EVERY == 1.0


def test_a_pod_the_watch_settled_is_not_read_again():
    c, cycle, p, share = setup()
    cycle.outcome(share, "default", p["metadata"]["name"], None, Reads())
    c.apply("pod", "MODIFIED", bound(p))  # the watch tells first
    reads = Reads()
    assert cycle.reread_due(reads) == [] and reads.asked == []


def test_an_answer_older_than_a_new_write_does_not_undo_it():
    c, cycle, p, share = setup()
    uid, name = p["metadata"]["uid"], p["metadata"]["name"]
    cycle.outcome(share, "default", name, None, Reads())
    cycle.reread_due(Reads())  # a read goes out ...
    assert cycle.learn(uid, 200, p) == "unbound"  # ... the front-end's own read settles it
    again = assumed(c, p)  # and it is bound again
    assert cycle.outcome(again, "default", name, 201, Reads())[0] is Outcome.BOUND
    assert cycle.read_answer(uid, 200, p) is None  # the old read: "unbound", too late
    assert c.phase(uid) is Phase.WRITTEN and used(c) == HELD


def test_the_period_is_read_when_due_not_when_imported(monkeypatch):
    """A front-end's test may shorten the period (the allocator's tests do)."""
    c, cycle, p, share = setup()
    cycle.outcome(share, "default", p["metadata"]["name"], None, Reads())
    reads = Reads()
    cycle.reread_due(reads)
    cycle.read_answer(p["metadata"]["uid"], 0, None)
    monkeypatch.setattr(binding_cycle, "REREAD_EVERY", 0.0)
    assert len(cycle.reread_due(reads)) == 1
