"""`mthreads-webhook cards`: the cluster's cards at a glance, read from the API server alone."""

from __future__ import annotations

import sys

from ..config import Config
from ..startup import StartupError


def add_parser(subparsers, kubeconfig_help: str) -> None:
    c = subparsers.add_parser("cards", help="show each card's use and pods, and the pending pods")
    c.add_argument("--kubeconfig", help=kubeconfig_help)
    c.add_argument("--config", help="config file, for other resource names (default: all defaults)")
    c.add_argument("--node", help="only this node's cards")
    c.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table",
                   help="table: 80 columns, names wrapped, never cut; wide: one line a card; json")


async def _list(api, path: str, query: dict | None = None) -> list[dict]:
    from ..kube.api import ApiError
    try:
        reply = await api.call("GET", path, query)
    except ApiError as e:
        raise StartupError(f"cards: cannot reach the API server: {e}") from None
    if not reply.ok:
        raise StartupError(f"cards: GET {path}: {reply.message()}")
    return (reply.body or {}).get("items") or []


async def _read(api) -> tuple[list[dict], list[dict], list[dict]]:
    """The nodes, the pods and the FailedScheduling events."""
    return (await _list(api, "/api/v1/nodes"), await _list(api, "/api/v1/pods"),
            await _list(api, "/api/v1/events", {"fieldSelector": "reason=FailedScheduling"}))


def run(config: Config, kubeconfig: str | None, node: str | None, output: str) -> int:
    """Print the report; `kubeconfig` as kubeconfig.find_cluster found it (None: in-cluster)."""
    from ..kube.api import Api, KubeconfigError
    from ..kube.io_loop import run_blocking
    from . import cards_report  # here: every command parses its flags through this module
    try:
        api = Api.from_kubeconfig(kubeconfig, connections=1)
    except KubeconfigError as e:
        raise StartupError(str(e)) from None
    nodes, pods, events = run_blocking(_read(api))
    r = cards_report.report(nodes, pods, events, config.mthreads, node)
    sys.stdout.write(cards_report.as_json(r) if output == "json" else
                     cards_report.table(r, None if output == "wide" else cards_report.WIDTH))
    return 0
