"""What a node's annotations say of its cards (SPEC 4): which cards are cordoned
(`hami.io/device-cordon`, HAMi's key and format) and how many containers may share one card
(`mthreads.com/max-instances-per-card`, else the config's `maxInstancesPerCard`); and, for
the operator, what in them was ignored.

A bad entry is ignored on its own, so one typo never uncordons the other cards. Spaces around
an id are trimmed, as HAMi trims them; an id with spaces inside, an empty item, or the id of
another node's card is ignored and named in `ignored`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import annotations as keys
from ..config import MAX_INSTANCES
from ..json_types import JsonObject

_INDEX = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class CardSettings:
    cordoned: frozenset[str] = frozenset()  # card ids
    max_instances: int = MAX_INSTANCES
    ignored: tuple[str, ...] = ()  # what was ignored and why, one text per annotation


def cordoned_cards(node: str, text: object) -> tuple[frozenset[str], list[str]]:
    """(the card ids of `node` the annotation names, the entries ignored with why)."""
    if not isinstance(text, str):
        return frozenset(), []
    prefix = f"{node}-mthreads-"
    cards, bad = set(), []
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            bad.append(f"{item!r} (an empty item)")
        elif any(c.isspace() for c in entry):
            bad.append(f"{entry!r} (spaces inside an id)")
        elif not entry.startswith(prefix) or not _INDEX.fullmatch(entry[len(prefix):]):
            bad.append(f"{entry!r} (not a card of {node}: <node>-mthreads-<index>)")
        else:
            cards.add(entry)
    return frozenset(cards), bad


def card_settings(node: JsonObject, default_limit: int) -> CardSettings:
    meta = node.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name = meta.get("name", "")
    cordoned, bad = cordoned_cards(name, ann.get(keys.CORDON))
    ignored = [f"{keys.CORDON}: ignored {', '.join(bad)}"] if bad else []
    limit = default_limit
    raw = ann.get(keys.MAX_INSTANCES)
    if raw is not None:
        text = str(raw).strip()
        if _INDEX.fullmatch(text) and 1 <= int(text) <= MAX_INSTANCES:
            limit = int(text)
        else:
            ignored.append(f"{keys.MAX_INSTANCES}: ignored {raw!r} (not a whole number from 1 to "
                           f"{MAX_INSTANCES}); the limit is maxInstancesPerCard, {default_limit}")
    return CardSettings(cordoned, limit, tuple(ignored))
