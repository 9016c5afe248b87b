"""Kubernetes objects as this project reads them: plain JSON data, as `json.loads` decodes it.

A pod, a node, a Binding, an AdmissionReview, and every object inside them (metadata, a
container, a map of limits, a JSON Patch operation) is a JSON object: a dict with string keys
and values of any JSON type. The code reads them defensively (a missing key, a value of the
wrong type), so the values are `Any` rather than a schema.
"""

from __future__ import annotations

from typing import Any, Iterable, TypeAlias

JsonObject: TypeAlias = dict[str, Any]


def all_text(values: Iterable[object]) -> bool:
    """Whether every value is a str: joining them is one pass in C that refuses anything else
    (a set of their types, or a test per value, cost several times as much)."""
    try:
        "".join(values)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True
