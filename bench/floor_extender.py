"""The floor of the extender path in this project's stack: an extender that decides nothing.

It answers kube-scheduler as the extender does, on the extender's own HTTP server
(webhook/extender/http_server.py), API client (webhook/kube/api.py) and watches
(webhook/kube/informer.py), with none of its work between them:

- /filter: the first node name kube-scheduler sent (the body parsed, nothing checked);
- /prioritize: every node 0;
- /bind: one pods/binding POST whose annotations have the keys and sizes of the extender's
  (SPEC 4), for card 0 of the node;
- the same watches as the extender's (nodes, bound live pods, pods waiting for its scheduler;
  `--no-watch`: none), each event parsed and dropped.

What this costs per pod is what any extender built on these parts pays before its first
decision: the bench's row of it (bench/e2e.py, `--e2e-only ...,floor`) is the nearest the real
extender could come to kube-scheduler alone on the same machine.

    python -m bench.floor_extender --kubeconfig F --bind 127.0.0.1:PORT [--no-watch] [--config F]
"""

from __future__ import annotations

import socket
import sys


def _listen(bind: str) -> socket.socket:
    # before the imports, as the extender does (webhook/base/listen.py)
    host, _, port = bind.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(1024)
    return sock


def _args(argv: list[str]):
    import argparse
    p = argparse.ArgumentParser(prog="python -m bench.floor_extender")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--bind", required=True, help="HOST:PORT, an IPv4 address")
    p.add_argument("--config", help="ignored: taken for the extender's command line")
    p.add_argument("--no-watch", action="store_true", help="no watches at all")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _args(argv)
    sock = _listen(args.bind)

    import asyncio
    import signal
    import time

    import uvloop

    from webhook.base import fast_json
    from webhook.extender import wire
    from webhook.extender.app import JSON
    from webhook.extender.http_server import HttpServer
    from webhook.kube.api import Api
    from webhook.kube.informer import Informer
    from webhook.kube.pods import post_binding
    from webhook.model.hami import Device
    from webhook.scheduling.binding import binding_body
    from webhook.scheduling.decide import Placement
    from webhook.scheduling.pod_status import BOUND_LIVE_PODS, waiting_for
    from webhook.scheduling.resources import Resources
    from webhook.scheduling.shares import PodShare

    from .workload import SCHEDULER

    api = Api.from_kubeconfig(args.kubeconfig)
    watched = [] if args.no_watch else [
        ("/api/v1/nodes", None), ("/api/v1/pods", BOUND_LIVE_PODS),
        ("/api/v1/pods", waiting_for(SCHEDULER))]
    listed: set[int] = set()

    def card_zero(uid: str, node: str) -> Placement:  # a slice of card 0 of the node
        return Placement(node, ((Device(f"{node}-mthreads-0", 16384, 25),),), "0",
                         PodShare(uid, node, Resources()))

    async def bind(body: bytes):
        b = wire.binding_args(fast_json.loads(body))
        status, message = await post_binding(api, binding_body(
            b.namespace, b.name, b.uid, card_zero(b.uid, b.node), time.time_ns(),
            with_annotations=True))
        ok = status is not None and 200 <= status < 300
        return 200, JSON, fast_json.dumps(wire.binding_result("" if ok else f"{status}: {message}"))

    def respond(method: str, path: str, body: bytes | None):
        if path == "/filter":
            args = wire.extender_args(fast_json.loads(body))
            if not args.node_names:
                return 200, JSON, fast_json.dumps(wire.filter_error("no node"))
            return 200, JSON, fast_json.dumps(wire.filter_result(args, args.node_names[:1], {}))
        if path == "/prioritize":
            names = wire.extender_args(fast_json.loads(body)).node_names
            return 200, JSON, fast_json.dumps(wire.priority_list([(n, 0) for n in names]))
        if path == "/bind":
            return bind(body)
        if path == "/readyz":
            return (200 if len(listed) == len(watched) else 503), JSON, b"{}"
        return 404, JSON, b"{}"

    def dropped(i: int):
        def emit(event: str, obj) -> None:
            if event == "RESET":
                listed.add(i)
        return emit

    async def serve() -> None:
        server = HttpServer(respond)
        await server.start(sock)
        watches = [asyncio.ensure_future(Informer(api, "floor", path, selector, dropped(i)).run())
                   for i, (path, selector) in enumerate(watched)]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for w in watches:
            w.cancel()
        await server.close()

    uvloop.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
