"""The API server's merge of a pod affinity term's `matchLabelKeys` and `mismatchLabelKeys`
(1.33 GA, on by default from 1.31) into its labelSelector, done once when the pod is created
(the pod strategy's PrepareForCreate, upstream's applyMatchLabelKeysAndMismatchLabelKeys): for
each key the pod carries, `key In (value)` for matchLabelKeys, `key NotIn (value)` for
mismatchLabelKeys; a term without a labelSelector is left alone (it selects nothing anyway).

A stored pod already carries the merged selector, so the deciding paths read the selector as
it is; a pod read from a file (`cards what-if FILE`) is merged here first. Merging a stored pod
again adds requirements it already has: the same answer.
"""

from __future__ import annotations

import copy
from typing import Mapping

from ..base.json_types import JsonObject
from .pod_facts import written_terms

KINDS = ("podAffinity", "podAntiAffinity")


def with_label_keys_merged(pod: JsonObject) -> JsonObject:
    """The pod as the API server would store it: a copy with every (anti-)affinity term's
    label keys merged into its labelSelector; the pod itself when no term names any. A field
    of the wrong shape raises ValueError naming it."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if not _names_keys(pod):
        return pod
    out = copy.deepcopy(pod)
    affinity = out["spec"]["affinity"]
    for kind in KINDS:
        section = affinity.get(kind) or {}
        for i, t in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()):
            _merge(t, labels, f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, w in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
            if isinstance(w, dict) and isinstance(w.get("podAffinityTerm"), dict):
                _merge(w["podAffinityTerm"], labels, f"spec.affinity.{kind}."
                       f"preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm")
    return out


def _names_keys(pod: JsonObject) -> bool:
    return any(t.get("matchLabelKeys") or t.get("mismatchLabelKeys")
               for t in written_terms(pod, preferred=True))


def _merge(term: object, labels: Mapping[str, object], where: str) -> None:
    if not isinstance(term, dict):
        raise ValueError(f"{where} is not a mapping")
    selector = term.get("labelSelector")
    keys = [(k, "In") for k in _keys(term, "matchLabelKeys", where)] + \
        [(k, "NotIn") for k in _keys(term, "mismatchLabelKeys", where)]
    if not keys or selector is None:
        return
    if not isinstance(selector, dict):
        raise ValueError(f"{where}.labelSelector is not a mapping")
    expressions = selector.setdefault("matchExpressions", [])
    if not isinstance(expressions, list):
        raise ValueError(f"{where}.labelSelector.matchExpressions is not a list")
    for key, operator in keys:
        value = labels.get(key)
        if isinstance(value, str):
            expressions.append({"key": key, "operator": operator, "values": [value]})


def _keys(term: JsonObject, field: str, where: str) -> list[str]:
    keys = term.get(field) or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"{where}.{field} is not a list of label keys")
    return keys
