"""Who gives up a connection slot when they run short (webhook/server/slots.py): the peer holding
the most among those with one to give, its most expendable connection first (issue 46,
finding 3)."""

from __future__ import annotations

import pytest

from webhook.server.slots import max_per_peer, to_close


@pytest.mark.parametrize("slots, per_peer", [(1000, 250), (8, 2), (3, 1), (1, 1)])
def test_one_peer_may_hold_a_quarter_of_the_slots(slots, per_peer):
    assert max_per_peer(slots) == per_peer


def tier(*names: str) -> list[tuple[str, str]]:
    """(peer, connection) pairs from names like "a1": peer "a", its connection "a1"."""
    return [(name[0], name) for name in names]


@pytest.mark.parametrize("held, idle, silent, sending, closed", [
    # Nothing may give way (every connection has a request read in full): none is closed.
    ({"a": 500, "b": 500}, [], [], [], None),
    # The peer holding the most gives way, not the API server's idle connection.
    ({"a": 499, "b": 500, "api": 1}, tier("a1", "b1", "api"), [], [], "b1"),
    # ... its longest-idle connection first (the tier's order).
    ({"a": 2, "b": 5}, tier("a1", "b1", "b2"), [], [], "b1"),
    # Idle before silent, silent before sending, within the peer.
    ({"b": 5}, tier("b3"), tier("b1"), tier("b2"), "b3"),
    ({"b": 5}, [], tier("b1"), tier("b2"), "b1"),
    ({"b": 5}, [], [], tier("b2"), "b2"),
    # The peer holding the most comes first, even when all it can give is a connection still
    # sending its first request and another peer has idle ones.
    ({"a": 10, "b": 400}, tier("a1"), [], tier("b1"), "b1"),
    # A peer holding the most but with nothing to give (its requests all read in full) is
    # passed over for the next.
    ({"a": 10, "b": 400, "c": 20}, tier("a1"), tier("c1"), [], "c1"),
    # Among peers holding as many, the one met first: idle ones before silent ones.
    ({"a": 250, "b": 250}, tier("a1"), tier("b1"), [], "a1"),
    ({"a": 250, "b": 250}, tier("b1", "a1"), [], [], "b1"),
])
def test_which_connection_gives_way(held, idle, silent, sending, closed):
    assert to_close(held, [idle, silent, sending]) == closed
