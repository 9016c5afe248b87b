"""Who holds the worker's connection slots, and who gives one up when they run short (issue 46,
finding 3). Pure bookkeeping: peers and connections are whatever the worker passes.

gthread stops accepting at `worker_connections`, and newcomers then wait in the kernel's backlog
until some connection ends. Two addresses holding 500 connections each (kept alive after one
review, plus silent ones opened again whenever the 3 s read budget cut them off) left a third
peer, the API server, 2.0-2.5 s in that backlog for every review. So, as nginx does with its
reusable connections when `worker_connections` runs out, and Go's http.Server with its idle
ones when it stops:

- one peer (address) may hold at most a PEER_SHARE-th of the slots (250 of 1,000): more than an
  API server's burst needs (each of its concurrent calls opens a connection; the webhook
  answers about 1,300 small reviews a second, so 250 at once are a fraction of a second's
  work), and three API servers at their share still leave a quarter for everyone else;
- when every slot is taken, a connection that has no request read in full gives way to the
  newcomer: of the peer holding the most connections among those that have one to give, the
  first of its connections in the worker's order of tiers (kept-alive idle ones first: closing
  one costs its client a reconnect; then those that have sent nothing; then those still sending
  their first request). A request read in full, waiting for a thread or running, is never cut.
  The API server, holding few connections, keeps its kept-alive ones.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

PEER_SHARE = 4  # one peer may hold 1 / PEER_SHARE of the slots

Conn = TypeVar("Conn")


def max_per_peer(slots: int) -> int:
    """How many of `slots` connections one peer may hold."""
    return max(1, slots // PEER_SHARE)


def to_close(held: Mapping[Hashable, int],
             tiers: Iterable[Iterable[tuple[Hashable, Conn]]]) -> Conn | None:
    """The connection to close so that a newcomer gets a slot, or None if none may be.

    `held`: connections per peer, all of them; `tiers`: the (peer, connection) pairs that may
    give way, the most expendable tier first, each in the order to close them (oldest first)."""
    first: dict[Hashable, Conn] = {}  # each peer's first candidate, tiers in order
    for tier in tiers:
        for peer, conn in tier:
            first.setdefault(peer, conn)
    if not first:
        return None
    # max() keeps the first of equals: among peers holding as many, the one met first
    return first[max(first, key=lambda peer: held.get(peer, 0))]
