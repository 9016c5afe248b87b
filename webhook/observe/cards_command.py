"""`mthreads-webhook cards`: the cluster's cards at a glance, read from the API server alone."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..config import ConfigError, load_config
from . import cards_report

PROG = "mthreads-webhook cards"


def register(subparsers) -> None:
    c = subparsers.add_parser("cards", help="show each card's use and pods, and the pending pods")
    c.add_argument("--kubeconfig", help="default: $KUBECONFIG, the in-cluster config, ~/.kube/config")
    c.add_argument("--config", help="config file, for other resource names (default: all defaults)")
    c.add_argument("--node", help="only this node's cards")
    c.add_argument("-o", "--output", choices=("table", "json"), default="table")
    c.set_defaults(run=run)


def _kubeconfig(given: str | None) -> str | None:
    """As kubectl finds it; None means the in-cluster config."""
    if given:
        return given
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return env
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    home = Path.home() / ".kube" / "config"
    return str(home) if home.exists() else None


class CannotList(Exception):
    """The API server could not be reached, or refused a list (the message says which)."""


def _list(api, path: str, query: dict | None = None) -> list[dict]:
    from ..allocator.api import ApiError
    try:
        reply = api.call("GET", path, query)
    except ApiError as e:
        raise CannotList(f"cannot reach the API server: {e}") from None
    if not reply.ok:
        raise CannotList(f"GET {path}: {reply.message()}")
    return (reply.body or {}).get("items") or []


def run(args) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"{PROG}: config: {e}", file=sys.stderr)
        return 2
    from ..allocator.api import Api, make_api_client
    kubeconfig = _kubeconfig(args.kubeconfig)
    try:
        api = Api(make_api_client(kubeconfig, connections=1))
        nodes = _list(api, "/api/v1/nodes")
        pods = _list(api, "/api/v1/pods")
        events = _list(api, "/api/v1/events", {"fieldSelector": "reason=FailedScheduling"})
    except CannotList as e:
        print(f"{PROG}: {e}".splitlines()[0], file=sys.stderr)
        return 1
    except Exception as e:  # a missing or unreadable kubeconfig, no in-cluster config
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster config"
        print(f"{PROG}: no cluster to talk to ({where}): {e}".splitlines()[0], file=sys.stderr)
        return 1
    r = cards_report.report(nodes, pods, events, config.mthreads, args.node)
    out = cards_report.as_json(r) if args.output == "json" else cards_report.table(r)
    sys.stdout.write(out)
    return 0
