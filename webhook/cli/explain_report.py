"""`cards explain` and `cards what-if`, the pure part: from the cluster's lists and one pod to
the allocator's answer for it (scheduling/explain.py, on a scheduler cache built from the lists
as the allocator builds its own), then a text of at most 80 columns that never cuts a name, or
JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..model.config import Config
from ..scheduling.cache import NAMESPACE, STORAGE_KINDS, SchedulerCache
from ..scheduling.explain import Explanation, NodeWhy, explain
from ..scheduling.pod_status import is_bound, is_finished, name_of, scheduling_gates, uid_of
from ..scheduling.priority import pod_priority
from ..scheduling.request import request_of
from .cards_report import WIDTH, gated
from .text_lines import wrap

DRY_RUN = "a dry run: nothing is evicted"


@dataclass(frozen=True)
class Explained:
    pod: str  # namespace/name
    node: str | None  # the node it is bound to: nothing to explain
    explanation: Explanation | None
    names: dict[str, str]  # uid -> namespace/name of the cluster's pods (the victims' names)
    notes: tuple[str, ...] = ()  # what else keeps it from being decided


def explain_pod(pod: dict, nodes: list[dict], pods: list[dict], config: Config,
                storage: dict[str, list[dict]] | None = None,
                namespaces: list[dict] | None = None) -> Explained:
    """`storage`: the claims, volumes, classes and CSINodes by kind ("pvc", "pv",
    "storageclass", "csinode"), read when the pod names a claim or an in-tree disk (the
    allocator's volume rules read them); `namespaces`: the Namespaces (the labels affinity
    terms' namespaceSelector reads)."""
    if is_bound(pod):
        return Explained(name_of(pod), pod["spec"]["nodeName"], None, {})
    storage = storage or {}
    cache = SchedulerCache(config.mthreads, kinds=("node", "pod", NAMESPACE) + STORAGE_KINDS)
    cache.apply("node", "RESET", nodes)
    cache.apply(NAMESPACE, "RESET", namespaces or [])
    cache.apply("pod", "RESET", [p for p in pods if not is_finished(p)])
    for kind in STORAGE_KINDS:
        cache.apply(kind, "RESET", storage.get(kind, []))
    ask = request_of(pod, config)
    with cache.deciding() as state:
        e = explain(pod, ask, state, config, cache.holders(state.nodes), pod_priority(pod))
    notes = []
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    if scheduler != config.scheduler_name:
        notes.append(f"it waits for the scheduler {scheduler!r}, not {config.scheduler_name!r}: "
                     f"this allocator does not place it")
    gates = scheduling_gates(pod)
    if gates:
        notes.append(gated(gates))
    return Explained(name_of(pod), None, e, {uid_of(p): name_of(p) for p in pods}, tuple(notes))


def text(x: Explained, width: int | None = WIDTH) -> str:
    """What `cards explain` prints; `width` None: no line is wrapped."""
    lines: list[str] = []

    def say(line: str, indent: str = "") -> None:
        lines.extend(wrap(indent + line, width, indent + "    "))

    e = x.explanation
    if e is None:
        say(f"{x.pod} is bound to {x.node}: nothing to explain")
        return "\n".join(lines) + "\n"
    if e.invalid:
        say(f"{x.pod} is never placed: {e.invalid}")
        return "\n".join(lines) + "\n"
    if e.placement is not None:
        cards = _cards_of(e)
        say(f"{x.pod} fits: the allocator would bind it to {e.placement.node}"
            + (f" ({', '.join(cards)})" if cards else ""))
    else:
        say(f"{x.pod} does not fit: {e.message}")
    for note in x.notes:
        say(f"note: {note}")
    lines.append("")
    for n in e.nodes:
        say(_node_line(n))
        for c in n.cards:
            say(f"card {c.card.index}: {c.detail}", "    ")
    if e.placement is None:
        lines.append("")
        say(_room_text(x, e))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _cards_of(e: Explanation) -> list[str]:
    assert e.placement is not None
    return list(dict.fromkeys(d.card for ds in e.placement.devices for d in ds))


def _node_line(n: NodeWhy) -> str:
    if n.reason is None:
        on = f", on {', '.join(c.id for c in n.chosen)}" if n.chosen else ""
        return f"{n.node}: fits{on}"
    return f"{n.node}: {n.reason}" + (f": {n.detail}" if n.detail else "")


def _room_text(x: Explained, e: Explanation) -> str:
    if not e.asks_cards:
        return "to make room: no cards are asked for; removing card holders is no answer"
    if e.room is None:
        return (f"to make room: no removal of pods of lower priority than {e.priority} lets it "
                f"fit on a node whose other rules let it in")
    if not e.room.victims:
        return (f"to make room: nothing more; the pods already terminating on {e.room.node} "
                f"leave room once they are gone")
    who = ", ".join(f"{x.names.get(h.share.uid, h.share.uid)} (priority {h.priority})"
                    for h in e.room.victims)
    return f"to make room ({DRY_RUN}): remove {len(e.room.victims)} pod(s) on {e.room.node}: {who}"


def denied(path: str, message: str, as_json: bool) -> str:
    """`cards what-if`'s answer for a pod the webhook would not let in."""
    if as_json:
        return json.dumps({"file": path, "denied": message}, indent=2) + "\n"
    return "\n".join(wrap(f"{path}: {message}", WIDTH)) + "\n"


def as_json(x: Explained) -> str:
    e = x.explanation
    doc: dict = {"pod": x.pod, "boundTo": x.node, "notes": list(x.notes)}
    if e is not None:
        doc.update({
            "priority": e.priority, "invalid": e.invalid, "fits": e.placement is not None,
            "bindTo": {"node": e.placement.node, "cards": _cards_of(e)} if e.placement else None,
            "message": e.message or None,
            "nodes": [{"node": n.node, "fits": n.reason is None, "reason": n.reason,
                       "detail": n.detail or None, "cards": [c.id for c in n.chosen],
                       "cardReasons": [{"card": c.card.id, "index": c.card.index,
                                        "reason": c.reason, "detail": c.detail} for c in n.cards]}
                      for n in e.nodes],
            "makeRoom": None if e.room is None else {
                "node": e.room.node, "dryRun": True,
                "victims": [{"pod": x.names.get(h.share.uid, h.share.uid), "uid": h.share.uid,
                             "priority": h.priority} for h in e.room.victims]},
        })
    return json.dumps(doc, indent=2) + "\n"
