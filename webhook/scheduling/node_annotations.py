"""What a node's annotations say of its cards (SPEC 4): which cards are cordoned
(`hami.io/device-cordon`, HAMi's key and format) and how many containers may share one card
(`mthreads.com/max-instances-per-card`, else the config's `maxInstancesPerCard`); and, for
the operator, what in them was ignored.

A bad entry is ignored on its own, so one typo never uncordons the other cards. Spaces around
an id are trimmed, as HAMi trims them; an id with spaces inside, an empty item, or the id of
another node's card is ignored and named in `ignored`. A bad limit gives the config's. Whatever
an annotation holds (the API server allows 256 KiB of them), it is read in one pass, no number
of more than a few digits is converted, and a message quotes at most a few short entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base.json_types import JsonObject
from ..base.shown import shown
from ..model import annotations as keys
from ..model.config import MAX_INSTANCES

_INDEX = re.compile(r"[0-9]+")
_LIMIT = re.compile(r"0*([0-9]{1,3})")  # 1..16, leading zeros allowed: never a long number to convert
WARNING_REASON = "InvalidCardAnnotation"  # the Warning event's reason on the node
READ_KEYS = (keys.CORDON, keys.MAX_INSTANCES)  # every node annotation the project reads
_LISTED = 8  # ignored entries a message names, the count of the rest after them


@dataclass(frozen=True)
class CardSettings:
    cordoned: frozenset[str] = frozenset()  # card ids
    max_instances: int = MAX_INSTANCES
    ignored: tuple[str, ...] = ()  # what was ignored and why, one text per annotation
    ignored_keys: tuple[str, ...] = ()  # the annotations those texts are about, in their order


def cordoned_cards(node: str, text: object) -> tuple[frozenset[str], list[str]]:
    """(the card ids of `node` the annotation names, the entries ignored with why)."""
    if not isinstance(text, str):
        return frozenset(), []
    prefix = f"{node}-mthreads-"
    cards, bad = set(), []
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            bad.append(f"{shown(item)} (an empty item)")
        elif any(c.isspace() for c in entry):
            bad.append(f"{shown(entry)} (spaces inside an id)")
        elif not entry.startswith(prefix) or not _INDEX.fullmatch(entry[len(prefix):]):
            bad.append(f"{shown(entry)} (not a card of {node}: <node>-mthreads-<index>)")
        else:
            cards.add(entry)
    if len(bad) > _LISTED:
        bad[_LISTED:] = [f"{len(bad) - _LISTED} more entries"]
    return frozenset(cards), bad


def card_settings(node: JsonObject, default_limit: int) -> CardSettings:
    meta = node.get("metadata") or {}
    ann = meta.get("annotations") or {}
    name = meta.get("name", "")
    cordoned, bad = cordoned_cards(name, ann.get(keys.CORDON))
    ignored = [f"{keys.CORDON}: ignored {', '.join(bad)}"] if bad else []
    ignored_keys = [keys.CORDON] if bad else []
    limit = default_limit
    raw = ann.get(keys.MAX_INSTANCES)
    if raw is not None:
        given = _limit(raw)
        if given is not None:
            limit = given
        else:
            quoted = shown(raw) if isinstance(raw, str) else f"a {type(raw).__name__}"
            ignored.append(f"{keys.MAX_INSTANCES}: ignored {quoted} (not a whole number "
                           f"from 1 to {MAX_INSTANCES}); the limit is maxInstancesPerCard, {default_limit}")
            ignored_keys.append(keys.MAX_INSTANCES)
    return CardSettings(cordoned, limit, tuple(ignored), tuple(ignored_keys))


def _limit(raw: object) -> int | None:
    """The containers per card an annotation gives, or None unless a whole number from 1 to 16."""
    m = _LIMIT.fullmatch(raw.strip()) if isinstance(raw, str) else None
    value = int(m.group(1)) if m else 0
    return value if 1 <= value <= MAX_INSTANCES else None


@dataclass(frozen=True)
class Ignored:
    """What a node's annotations had ignored, to tell the operator (a Warning event on it)."""

    node: str
    uid: str
    message: str


class IgnoredEntries:
    """Which nodes to warn about: once per change of what their annotations have ignored (not
    on every heartbeat), fed the node watch's events as they are applied."""

    def __init__(self, default_limit: int):
        self.default_limit = default_limit
        self._told: dict[str, tuple[str, ...]] = {}
        # the warnings told, per annotation (a metric); every key is in from the start, so
        # another thread may read it while this one counts
        self.counts: dict[str, int] = dict.fromkeys(READ_KEYS, 0)

    def seen(self, event: str, obj: JsonObject | list[JsonObject]) -> list[Ignored]:
        """The warnings an event brings: RESET (a full list), DELETED, or an add/update."""
        if event == "DELETED":
            assert isinstance(obj, dict)
            self._told.pop((obj.get("metadata") or {}).get("name", ""), None)
            return []
        nodes = obj if isinstance(obj, list) else [obj]
        if event == "RESET":
            listed = {(n.get("metadata") or {}).get("name", "") for n in nodes}
            self._told = {name: t for name, t in self._told.items() if name in listed}
        out = []
        for node in nodes:
            meta = node.get("metadata") or {}
            name, settings = meta.get("name", ""), card_settings(node, self.default_limit)
            ignored = settings.ignored
            if ignored != self._told.get(name, ()):
                if ignored:
                    out.append(Ignored(name, meta.get("uid", ""), "; ".join(ignored)))
                    self._told[name] = ignored
                    for key in settings.ignored_keys:
                        self.counts[key] += 1
                else:
                    self._told.pop(name, None)
        return out
