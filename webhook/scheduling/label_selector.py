"""A pod's LabelSelector (metav1.LabelSelector) as a plain predicate on label maps, with
Kubernetes' semantics: no selector matches nothing, an empty one matches everything, NotIn
and DoesNotExist match a pod without the key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..base.json_types import JsonObject

Requirement = tuple[str, str, frozenset[str]]  # (key, operator, values)


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...] | None  # None: matches nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.requirements is None:
            return False
        for key, op, values in self.requirements:
            value = labels.get(key)
            if op == "In":
                if value is None or value not in values:
                    return False
            elif op == "NotIn":
                if value is not None and value in values:
                    return False
            elif op == "Exists":
                if value is None:
                    return False
            elif value is not None:  # DoesNotExist
                return False
        return True


NOTHING = Selector(None)
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_of(raw: object) -> Selector:
    """A LabelSelector as the API server stores it; an unreadable one matches nothing (the API
    server validates them, so that is a pod read before validation)."""
    if not isinstance(raw, dict):
        return NOTHING
    reqs: list[Requirement] = [(k, "In", frozenset((v,)))
                               for k, v in (raw.get("matchLabels") or {}).items()]
    for e in raw.get("matchExpressions") or ():
        op = e.get("operator") if isinstance(e, dict) else None
        if op not in _OPERATORS or not isinstance(e.get("key"), str):
            return NOTHING
        reqs.append((e["key"], op, frozenset(str(v) for v in e.get("values") or ())))
    return Selector(tuple(sorted(reqs, key=lambda r: (r[0], r[1], sorted(r[2])))))


def labels_of(obj: JsonObject) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}
