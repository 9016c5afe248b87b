"""`cards what-if FILE`: the pod of a file, as the webhook would let it in (its patch applied
the same way), never created. A file that does not hold one Pod is an error naming what is
wrong; a pod the webhook would deny is an answer (its message)."""

from __future__ import annotations

import copy

import jsonpatch

from ..admission.mutate import patch_for
from ..admission.validate import Rules, check_create
from ..base.startup import StartupError
from ..base.yaml_files import YamlFileError, load_yaml
from ..model.config import Config
from ..model.pods import InvalidRequest
from ..scheduling.affinity_label_keys import with_label_keys_merged

UID = "what-if"  # the uid of the pod that is not created


def read_pod(path: str) -> dict:
    """The one Pod of a YAML or JSON file; StartupError naming the file and what is wrong."""
    try:
        docs = [d for d in load_yaml(path) if d is not None]
    except YamlFileError as e:
        raise StartupError(f"cards what-if: {e}") from None
    if len(docs) != 1:
        raise StartupError(f"cards what-if: {path}: holds {len(docs)} documents; give one Pod")
    (doc,) = docs
    kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
    if kind != "Pod":
        raise StartupError(f"cards what-if: {path}: not a Pod (kind: {kind})")
    spec = doc.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list) \
            or not spec["containers"]:
        raise StartupError(f"cards what-if: {path}: the Pod has no spec.containers")
    if not isinstance(doc.get("metadata") or {}, dict):
        raise StartupError(f"cards what-if: {path}: metadata is not a mapping")
    wrong = _volume_not_read(spec.get("volumes"))
    if wrong:  # the volume rules read each volume's source (scheduling/pod_facts.py)
        raise StartupError(f"cards what-if: {path}: {wrong}")
    return doc


def _volume_not_read(volumes: object) -> str | None:
    """What of spec.volumes is not of the shape the API server stores, or None."""
    if volumes is None:
        return None
    if not isinstance(volumes, list):
        return "spec.volumes is not a list"
    for i, v in enumerate(volumes):
        if not isinstance(v, dict):
            return f"spec.volumes[{i}] is not a mapping"
        for key, source in v.items():
            if key != "name" and source is not None and not isinstance(source, dict):
                return f"spec.volumes[{i}].{key} is not a mapping"
    return None


def admitted(doc: dict, config: Config) -> dict | str:
    """The pod as it would be created: the webhook's checks and patch, a namespace (`default`
    when the file names none), a name and a uid, its affinity terms' matchLabelKeys and
    mismatchLabelKeys merged (affinity_label_keys.py); or the webhook's denial."""
    pod = copy.deepcopy(doc)
    meta = pod.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("name", meta.get("generateName") or "what-if")
    meta["uid"] = UID
    rules = Rules.of(config)
    try:
        request = check_create(pod, rules, username="")
    except InvalidRequest as e:
        return f"the webhook would deny it: {e.message}"
    if request is not None:
        pod = jsonpatch.apply_patch(pod, patch_for(pod, request, rules))
    try:  # what the API server does next, as it stores the pod
        return with_label_keys_merged(pod)
    except ValueError as e:
        return f"the API server would refuse it: {e}"
