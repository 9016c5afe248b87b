"""The strict schemas of newer Kubernetes releases (kubernetes-validate), for test objects that
carry fields a 1.20 API server would prune: a test of a rule of today proves its pod is one that
today's API server accepts."""

from __future__ import annotations

import kubernetes_validate
import pytest

CURRENT = "1.37.0"


def valid_at(obj: dict, version: str = CURRENT) -> dict:
    """`obj` itself when `version`'s strict schema takes it; the test fails naming the field else."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        pytest.fail(f"{version} has no {obj.get('apiVersion')} {obj.get('kind')}")
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        pytest.fail(f"{version} refuses {obj.get('kind')} {path}: {e.message}")
    return obj


def valid_pod(pod: dict, version: str = CURRENT) -> dict:
    """`pod` (a Pod without apiVersion and kind, as the tables write them) itself when
    `version`'s strict schema takes it as a Pod."""
    valid_at({"apiVersion": "v1", "kind": "Pod", **pod}, version)
    return pod
