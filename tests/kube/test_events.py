"""FailedScheduling events without spam (webhook/kube/events.py): one per pod and message,
patched with a count."""

from webhook.kube.events import EventBook


def test_event_book_aggregates():
    book = EventBook(refresh=10)
    assert book.note("u", "m1", 0) == "create"
    book.written("u", "ev1", 0)
    assert [book.note("u", "m1", t) for t in (1, 2, 3)] == [None, None, None]
    assert book.note("u", "m1", 11) == "patch" and book.by_pod["u"].count == 5
    book.written("u", None, 11)
    assert book.note("u", "m1", 12) is None
    assert book.note("u", "m2", 13) == "create"  # another message: a new event
