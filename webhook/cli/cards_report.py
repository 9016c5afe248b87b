"""`mthreads-webhook cards`, the pure part: from nodes, pods and events to a table or JSON.

One line per card (node, card id, model, memory and cores used of total, its pods), then the
pending Mthreads pods with their FailedScheduling reason. Read with the allocator's own
decoding (inventory.node_cards, bound.bound_pod), so the figures are the allocator's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..metrics.card_views import CardView, card_views
from ..model.cards import CORES_PER_CARD
from ..model.config import MthreadsConfig
from ..model.pods import is_mthreads_pod, resource_names
from ..scheduling.bound import bound_pod
from ..scheduling.inventory import node_cards
from ..scheduling.pod_status import (
    TERMINAL,
    is_bound,
    name_of,
    scheduled_condition,
    scheduling_gates,
)
from .text_lines import pack, wrap

WIDTH = 80
NO_REASON = "not decided yet (is the allocator running?)"


def gated(gates: list[str]) -> str:
    return f"gated: not scheduled until its scheduling gates are removed ({', '.join(gates)})"


@dataclass(frozen=True)
class Pending:
    pod: str  # namespace/name
    reason: str


@dataclass(frozen=True)
class Report:
    cards: list[CardView]
    pending: list[Pending]
    problems: list[tuple[str, str]]  # (node, why its capacity cannot be read as cards)


def report(nodes: list[dict], pods: list[dict], events: list[dict], mt: MthreadsConfig,
           node: str | None = None) -> Report:
    # ended pods hold no card (the caches never list them)
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL]
    read = [(n["metadata"]["name"], node_cards(n, mt)) for n in nodes
            if node is None or n["metadata"]["name"] == node]
    held = [b for b in map(bound_pod, live) if b is not None]
    problems = sorted((name, cards.problem) for name, cards in read if cards.problem)
    return Report(card_views(read, held), _pending(live, events, mt), problems)


def _pending(pods: list[dict], events: list[dict], mt: MthreadsConfig) -> list[Pending]:
    latest: dict[str, tuple[str, str]] = {}  # pod uid -> (time, message) of its last event
    for e in events:
        if e.get("reason") != "FailedScheduling":
            continue
        uid = (e.get("involvedObject") or {}).get("uid", "")
        at = e.get("lastTimestamp") or e.get("eventTime") or ""
        if uid not in latest or at >= latest[uid][0]:
            latest[uid] = (at, e.get("message") or "")
    names = resource_names(mt)
    out = []
    for p in pods:
        meta = p.get("metadata") or {}
        if is_bound(p) or meta.get("deletionTimestamp") or not is_mthreads_pod(p, names):
            continue
        gates = scheduling_gates(p)
        reason = gated(gates) if gates else \
            latest.get(meta.get("uid", ""), ("", ""))[1] or _condition_message(p) or NO_REASON
        out.append(Pending(name_of(p), reason))
    return sorted(out, key=lambda x: x.pod)


def _condition_message(pod: dict) -> str:
    c = scheduled_condition(pod)
    return (c.get("message") or c.get("reason") or "") if c and c.get("status") == "False" else ""


def _gib(mib: int) -> str:
    return f"{mib / 1024:g}"


CORDONED = "(cordoned)"  # after a card id in the table


def _row(v: CardView) -> list[str]:
    card = f"{v.card.id} {CORDONED}" if v.cordoned else v.card.id
    return [v.node, card, v.card.model.name,
            f"{_gib(v.memory_used_mib)}/{_gib(v.card.memory_mib)}Gi",
            f"{v.cores_used}/{CORES_PER_CARD}", f"{v.containers}/{v.max_instances}"]


def table(r: Report, width: int | None = WIDTH) -> str:
    """The cards, then the pending pods; `width` None (`-o wide`): every column, one line a
    card and a pod, however long."""
    lines = _card_lines(r.cards, width) if r.cards else ["no Mthreads cards found"]
    for name, why in r.problems:
        lines.append(f"node {name}: no usable cards: {why}")
    lines.append("")
    if r.pending:
        lines.append(f"PENDING MTHREADS PODS ({len(r.pending)})")
        for p in r.pending:
            lines.extend(wrap(f"{p.pod}: {p.reason}", width))
    else:
        lines.append("no pending Mthreads pods")
    return "\n".join(line.rstrip() for line in lines) + "\n"


HEAD = ["NODE", "CARD", "MODEL", "MEMORY", "CORES", "SHARED", "PODS"]
MIN_PODS = 12  # columns left for the pods before the node column gives way


def _card_lines(views: list[CardView], width: int | None) -> list[str]:
    """The node once, on its first card; the pods of a card wrapped onto as many lines as they
    take, never cut. When a pod's name would not fit beside the other columns (or they leave
    the pods too little room) the node column is left out first: the card id begins with the
    node's name. A name longer than what is left still stands whole, past `width`."""
    rows = [_row(v) for v in views]
    fixed = len(HEAD) - 1
    widths = [max(len(x[i]) for x in [HEAD] + rows) for i in range(fixed)]
    longest = max((len(p) + 1 for v in views for p in v.pods), default=0)  # and its comma

    def room(first: int) -> int:
        return width - sum(widths[first:]) - 2 * (fixed - first) if width is not None else 0

    first = 0 if width is None or room(0) >= max(longest, MIN_PODS) else 1
    pods_room = None if width is None else max(room(first), MIN_PODS)

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells[first:fixed], widths[first:]))

    lines, last_node = [line(HEAD) + "  PODS"], None
    for v, cells in zip(views, rows):
        if cells[0] == last_node:
            cells[0] = ""
        else:
            last_node = cells[0]
        left = line(cells)
        pods = pack(list(v.pods), pods_room) if v.pods else ["-"]
        lines.append(f"{left}  {pods[0]}")
        lines.extend(" " * (len(left) + 2) + more for more in pods[1:])
    return lines


def as_json(r: Report) -> str:
    return json.dumps({
        "cards": [{"node": v.node, "card": v.card.id, "index": v.card.index,
                   "model": v.card.model.name,
                   "memoryUsedMiB": v.memory_used_mib, "memoryTotalMiB": v.card.memory_mib,
                   "coresUsed": v.cores_used, "coresTotal": CORES_PER_CARD,
                   "containers": v.containers, "containersLimit": v.max_instances,
                   "cordoned": v.cordoned, "pods": list(v.pods)} for v in r.cards],
        "pending": [{"pod": p.pod, "reason": p.reason} for p in r.pending],
        "problems": [{"node": n, "problem": why} for n, why in r.problems],
    }, indent=2) + "\n"
