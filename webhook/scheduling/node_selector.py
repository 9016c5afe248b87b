"""A pod's nodeSelector and required node affinity, read once into sets (`selection_of`) so that
each node's check costs what the node's labels cost, not what the pod's lists cost.

A term's expressions are merged per key: the `In` lists' intersection, the `NotIn` lists' union,
the tightest `Gt` and `Lt`. A key whose absence fails (In, Exists, Gt, Lt) must be among the
node's labels, so a term naming more of them than the node has labels fails at once; the keys
whose absence passes (NotIn, DoesNotExist) are looked up from the smaller side, the term's keys
or the node's labels. One node's check is O(terms × min(keys, labels)); the node-affinity attack
of issue 46 (200 `NotIn` lists of 1,000 hostnames) is one lookup a node.

Kubernetes' semantics, as node_fit.py read them before: an empty term matches nothing, a field
other than `metadata.name` has no value, a `Gt`/`Lt` takes one integer, an unknown operator
matches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Any, Mapping

from ..base.json_types import JsonObject

_ABSENCE_PASSES = frozenset(("NotIn", "DoesNotExist"))
NAME_FIELD = "metadata.name"


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Every expression of one term on one key, merged; `accepts` a present value."""

    absence_passes: bool
    allowed: frozenset[Any] | None = None  # In: the value must be in each list
    forbidden: AbstractSet[Any] = frozenset()  # NotIn: in none (never changed once made)
    above: int | None = None  # Gt: the value, as an integer, above each
    below: int | None = None  # Lt
    never: bool = False  # DoesNotExist, a malformed Gt/Lt, an unknown operator

    def accepts(self, value: object) -> bool:
        if self.never:
            return False
        if not isinstance(value, str):  # a label's value is a string: no list holds another
            return self.allowed is None and self.above is None and self.below is None
        if self.allowed is not None and value not in self.allowed:
            return False
        if value in self.forbidden:
            return False
        if self.above is not None or self.below is not None:
            try:
                have = int(value)
            except ValueError:
                return False
            if (self.above is not None and have <= self.above) or \
                    (self.below is not None and have >= self.below):
                return False
        return True


def _values(raw: object) -> frozenset[Any]:
    if not isinstance(raw, list):
        return frozenset()
    try:
        return frozenset(raw)  # what is not a string never equals a label's value
    except TypeError:  # an unhashable entry: no label value either
        return frozenset(v for v in raw if isinstance(v, str))


def _add_values(into: set[Any], raw: object) -> None:
    """`_values(raw)` added to `into`, without a set of its own (200,000 values cost twice)."""
    if isinstance(raw, list):
        try:
            into.update(raw)
        except TypeError:
            into.update(v for v in raw if isinstance(v, str))


def _number(raw: object) -> int | None:
    if not isinstance(raw, list) or len(raw) != 1:
        return None
    try:
        return int(raw[0])
    except (TypeError, ValueError):
        return None


def key_rule(exprs: list[JsonObject]) -> KeyRule:
    """The expressions of one term on one key, as one rule."""
    absence_passes, allowed, never = True, None, False
    forbidden: set[Any] = set()
    above: int | None = None
    below: int | None = None
    for e in exprs:
        op, raw = e.get("operator"), e.get("values")
        absence_passes = absence_passes and op in _ABSENCE_PASSES
        if op == "In":
            values = _values(raw)
            allowed = values if allowed is None else allowed & values
        elif op == "NotIn":
            _add_values(forbidden, raw)
        elif op in ("Gt", "Lt"):
            n = _number(raw)
            if n is None:
                never = True
            elif op == "Gt":
                above = n if above is None else max(above, n)
            else:
                below = n if below is None else min(below, n)
        elif op != "Exists":  # DoesNotExist with a value, or an operator Kubernetes has not
            never = True
    return KeyRule(absence_passes, allowed, forbidden, above, below, never)


@dataclass(frozen=True, slots=True)
class TermRule:
    """One nodeSelectorTerm: all its expressions (on the node's labels) and fields."""

    required: tuple[tuple[str, KeyRule], ...]  # keys whose absence fails
    optional: dict[str, KeyRule]  # keys whose absence passes
    name: KeyRule | None  # the matchFields on metadata.name
    never: bool  # empty, or a field that cannot match

    def matches(self, labels: Mapping[str, Any], name: str | None) -> bool:
        if self.never or len(self.required) > len(labels):
            return False
        for key, rule in self.required:
            value = labels.get(key)
            if value is None or not rule.accepts(value):
                return False
        optional = self.optional
        if len(optional) <= len(labels):
            for key, rule in optional.items():
                value = labels.get(key)
                if value is not None and not rule.accepts(value):
                    return False
        else:
            for key, value in labels.items():
                found = optional.get(key)
                if found is not None and value is not None and not found.accepts(value):
                    return False
        if self.name is None:
            return True
        return self.name.accepts(name) if name is not None else self.name.absence_passes


def _by_key(items: object) -> dict[object, list[JsonObject]] | None:
    """The expressions grouped by key, in order; None when one is not an object."""
    out: dict[object, list[JsonObject]] = {}
    for e in items if isinstance(items, list) else ():
        if not isinstance(e, dict):
            return None
        key = e.get("key")
        out.setdefault(key if isinstance(key, str) else None, []).append(e)
    return out


_NEVER = TermRule((), {}, None, True)


def term_rule(term: object) -> TermRule:
    if not isinstance(term, dict):
        return _NEVER
    exprs, fields = _by_key(term.get("matchExpressions")), _by_key(term.get("matchFields"))
    if exprs is None or fields is None or not (exprs or fields):
        return _NEVER
    required: list[tuple[str, KeyRule]] = []
    optional: dict[str, KeyRule] = {}
    for key, group in exprs.items():
        rule = key_rule(group)
        if not isinstance(key, str):  # no label has it: the value is absent
            if not rule.absence_passes:
                return _NEVER
        elif rule.absence_passes:
            optional[key] = rule
        else:
            required.append((key, rule))
    name = None
    for key, group in fields.items():
        rule = key_rule(group)
        if key == NAME_FIELD:
            name = rule
        elif not rule.absence_passes:  # another field has no value
            return _NEVER
    return TermRule(tuple(required), optional, name, False)


@dataclass(frozen=True, slots=True)
class NodeSelection:
    """nodeSelector (each label equal) and the required node affinity (any term)."""

    equal: tuple[tuple[str, Any], ...]  # nodeSelector's entries with a value
    unset: frozenset[str]  # its entries whose value is null: the label must be absent
    terms: tuple[TermRule, ...] | None  # None: no required node affinity

    def matches(self, node: JsonObject) -> bool:
        meta = node.get("metadata") or {}
        labels, name = meta.get("labels") or {}, meta.get("name", "")
        if len(self.equal) > len(labels):
            return False
        for k, v in self.equal:
            if labels.get(k) != v:
                return False
        if self.unset and _any_set(self.unset, labels):
            return False
        return self.terms is None or any(t.matches(labels, name) for t in self.terms)

    @property
    def cost(self) -> int:
        """The checks of one node, in terms and entries (each at most the node's labels)."""
        return len(self.equal) + len(self.unset) + len(self.terms or ())


def _any_set(keys: frozenset[str], labels: Mapping[str, Any]) -> bool:
    """Whether a label of `keys` has a value, read from the smaller side."""
    if len(keys) <= len(labels):
        return any(labels.get(k) is not None for k in keys)
    return any(v is not None and k in keys for k, v in labels.items())


def selection_of(pod_spec: JsonObject) -> NodeSelection:
    selector = pod_spec.get("nodeSelector") or {}
    pairs = selector.items() if isinstance(selector, dict) else ()
    equal = tuple((k, v) for k, v in pairs if v is not None)
    unset = frozenset(k for k, v in pairs if v is None and isinstance(k, str))
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is None:
        return NodeSelection(equal, unset, None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    return NodeSelection(equal, unset, tuple(term_rule(t) for t in terms or ()))
