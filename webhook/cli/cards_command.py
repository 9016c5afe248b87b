"""`mthreads-webhook cards`: the cluster's cards at a glance, read from the API server alone;
`cards explain NAMESPACE/POD` and `cards what-if FILE`: why a pod waits and what would make
room, read the same way (nothing is written or evicted)."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from ..base.startup import USAGE, StartupError
from ..model.config import Config

OUTPUTS = ("table", "wide", "json")


def add_parser(subparsers, kubeconfig_help: str) -> None:
    c = subparsers.add_parser("cards", help="show each card's use and pods, and the pending pods")
    _options(c, kubeconfig_help, None)
    c.add_argument("--node", help="only this node's cards")
    sub = c.add_subparsers(dest="cards_command", metavar="{explain,what-if}")
    e = sub.add_parser("explain", help="why a pod waits, node by node, and which pods' removal "
                                       "would make room (a dry run)")
    e.add_argument("pod", metavar="NAMESPACE/POD")
    _options(e, kubeconfig_help, argparse.SUPPRESS)
    w = sub.add_parser("what-if", help="the same for the pod of a file, as the webhook would "
                                       "admit it, not created")
    w.add_argument("file", metavar="FILE", help="one Pod, YAML or JSON")
    _options(w, kubeconfig_help, argparse.SUPPRESS)


def _options(p: argparse.ArgumentParser, kubeconfig_help: str, default: object) -> None:
    """The options of `cards` and of its subcommands (given after a subcommand, they are
    its: SUPPRESS keeps a subcommand from overwriting those given before it)."""
    p.add_argument("--kubeconfig", help=kubeconfig_help, default=default)
    p.add_argument("--config", default=default,
                   help="config file, for other resource names and maxInstancesPerCard "
                        "(default: all defaults)")
    p.add_argument("-o", "--output", choices=OUTPUTS, default=default or "table",
                   help="table: 80 columns, names wrapped, never cut; wide: nothing wrapped; json")


async def _get(api, what: str, path: str, query: dict | None = None):
    from ..kube.api import ApiError
    try:
        return await api.call("GET", path, query)
    except ApiError as e:
        raise StartupError(f"{what}: cannot reach the API server: {e}") from None


async def _list(api, what: str, path: str, query: dict | None = None) -> list[dict]:
    reply = await _get(api, what, path, query)
    if not reply.ok:
        raise StartupError(f"{what}: GET {path}: {reply.message()}")
    return (reply.body or {}).get("items") or []


async def _read(api) -> tuple[list[dict], list[dict], list[dict]]:
    """The nodes, the pods and the FailedScheduling events."""
    return (await _list(api, "cards", "/api/v1/nodes"), await _list(api, "cards", "/api/v1/pods"),
            await _list(api, "cards", "/api/v1/events", {"fieldSelector": "reason=FailedScheduling"}))


def run(config: Config, args: argparse.Namespace, cluster: Callable[[], str | None]) -> int:
    """Print what was asked; `cluster()` finds the kubeconfig as kubeconfig.find_cluster does
    (None: in-cluster), after the command's own arguments are checked."""
    from ..kube.io_loop import run_blocking
    from . import cards_report, explain_report  # here: every command parses its flags here
    command, output = getattr(args, "cards_command", None), args.output
    width = None if output == "wide" else cards_report.WIDTH
    if command is None:
        nodes, pods, events = run_blocking(_read(_api(cluster())))
        r = cards_report.report(nodes, pods, events, config.mthreads, args.node)
        sys.stdout.write(cards_report.as_json(r) if output == "json" else cards_report.table(r, width))
        return 0
    if command == "explain":
        namespace, name = _pod_name(args.pod)
        x = run_blocking(_explain_named(_api(cluster()), namespace, name, config))
    else:
        from . import what_if
        pod = what_if.admitted(what_if.read_pod(args.file), config)
        if isinstance(pod, str):  # the webhook's denial is the answer
            sys.stdout.write(explain_report.denied(args.file, pod, output == "json"))
            return 0
        x = run_blocking(_explain(_api(cluster()), "cards what-if", pod, config, created=False))
    sys.stdout.write(explain_report.as_json(x) if output == "json" else explain_report.text(x, width))
    return 0


def _api(kubeconfig: str | None):
    from ..kube.api import Api, KubeconfigError
    try:
        return Api.from_kubeconfig(kubeconfig, connections=1)
    except KubeconfigError as e:
        raise StartupError(str(e)) from None


def _pod_name(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise StartupError(f"cards explain: {text!r} is not NAMESPACE/POD", USAGE)
    return namespace, name


async def _explain_named(api, namespace: str, name: str, config: Config):
    what = "cards explain"
    reply = await _get(api, what, f"/api/v1/namespaces/{namespace}/pods/{name}")
    if reply.status == 404:
        raise StartupError(f"{what}: pod {namespace}/{name} not found")
    if not reply.ok or reply.body is None:
        raise StartupError(f"{what}: GET pod {namespace}/{name}: {reply.message()}")
    return await _explain(api, what, reply.body, config)


async def _explain(api, what: str, pod: dict, config: Config, created: bool = True):
    """The explanation of `pod` (`created`: by the API server, else a pod of a file) on the
    cluster as the API server holds it now."""
    from ..kube.informer import NAMESPACE_WATCH, STORAGE_WATCHES
    from ..scheduling.csi_limits import attachable
    from ..scheduling.pod_affinity import names_namespace_selector
    from ..scheduling.pod_facts import inline_disks
    from .explain_report import explain_pod
    nodes = await _list(api, what, "/api/v1/nodes")
    pods = await _list(api, what, "/api/v1/pods")
    storage = {kind: await _list(api, what, path) for kind, path in STORAGE_WATCHES} \
        if attachable(inline_disks(pod)) else {}
    # their labels change an answer only through a term's namespaceSelector: listed then only
    namespaces = await _list(api, what, NAMESPACE_WATCH[1]) \
        if any(names_namespace_selector(p) for p in [pod, *pods]) else []
    if not created:
        pod = await _with_priority(api, what, pod)
    return explain_pod(pod, nodes, pods, config, storage, namespaces)


async def _with_priority(api, what: str, pod: dict) -> dict:
    """A pod not created has no spec.priority yet: the API server's Priority admission would
    take it from its PriorityClass, or from the class marked globalDefault."""
    spec = pod["spec"]
    if "priority" in spec:
        return pod
    name = spec.get("priorityClassName")
    if name:
        reply = await _get(api, what, f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        if reply.status == 404:
            raise StartupError(f"{what}: priorityclass {name!r} not found (the API server would "
                               f"refuse the pod)")
        if not reply.ok or reply.body is None:
            raise StartupError(f"{what}: GET priorityclass {name}: {reply.message()}")
        return {**pod, "spec": {**spec, "priority": reply.body.get("value", 0)}}
    reply = await _get(api, what, "/apis/scheduling.k8s.io/v1/priorityclasses")
    default = [c for c in ((reply.body or {}).get("items") or []) if c.get("globalDefault")] \
        if reply.ok else []
    return {**pod, "spec": {**spec, "priority": default[0].get("value", 0) if default else 0}}
