"""The extender's HTTP endpoints: POST /filter, /prioritize, /preempt, /bind; GET /healthz,
/readyz.

`create_extender_app(config, state_source)` takes the state source (a `cache.Cache`, started
or fed by hand) so that the handlers can be tested with Flask's test client.

Concurrency: kube-scheduler decides one pod at a time (filter, prioritize), but binds in the
background, so the filter of the next pod may run before, during or after the bind of the
previous one; several binds may be in flight at once. The rule that keeps the cards from
being handed out twice and a pod from losing a race: **the filter chooses the node and the
cards under the lock and reserves them** (an assumed share, counted by every later filter
and bind), answering that one node; the bind writes the reservation. A bind that finds no
reservation for its node (lapsed, or kube-scheduler chose another node) decides on the
state of that moment, as before, and answers an error if the cards are taken since.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, jsonify, request

from .. import annotations as keys
from ..cards import Fleet
from ..config import Config
from ..kube.binder import post_binding
from ..scheduling.binding import binding_body
from ..scheduling.decide import Placement
from ..observe.hami_metrics import metrics_page
from ..scheduling.request import request_of
from . import wire

log = logging.getLogger("webhook.extender")

NOT_SYNCED = "the extender has not listed nodes and pods yet"
# A call that comes while the extender is still listing (just started) waits this long for it:
# an error would park the pod in kube-scheduler's unschedulable queue for up to a minute.
READY_WAIT = 5.0  # seconds, below the configured httpTimeout (10 s)


class Extender:
    def __init__(self, config: Config, source):
        self.config, self.source = config, source
        self.fleet = Fleet.of(config.mthreads.memory_per_card)
        self.ready_wait = READY_WAIT

    def filter(self, body) -> dict:
        args = wire.extender_args(body)
        if not self.source.wait_ready(self.ready_wait):
            return wire.filter_error(NOT_SYNCED)
        ask = request_of(args.pod, self.config, self.fleet)
        if ask.need is None or ask.invalid:  # no card to choose: every node's answer
            fits, failed = self.source.filter(args.pod, ask, args.node_names)
            return wire.filter_result(args, fits, failed)
        result = self.source.reserve(args.pod, ask, args.node_names)
        if isinstance(result, str):
            return wire.filter_error(result)
        chosen, failed = result
        # The one node chosen; the other fitting nodes are left out without a reason (1.20
        # takes the answer's nodes as the feasible ones), so kube-scheduler binds there.
        return wire.filter_result(args, [chosen.node] if chosen else [], failed)

    def preempt(self, body) -> dict:
        args = wire.preemption_args(body)
        if not self.source.wait_ready(self.ready_wait):
            return wire.preemption_result({})
        ask = request_of(args.pod, self.config, self.fleet)
        if ask.need is None or ask.invalid:  # the cards are not what keeps it out
            return wire.preemption_result(args.victims if not ask.invalid else {})
        chosen = self.source.victims(args.pod, ask, args.victims)
        meta = args.pod["metadata"]
        log.info("preempt %s/%s: %s", meta.get("namespace"), meta.get("name"), "; ".join(
            f"{node}: {len(uids)} victim(s)" for node, (uids, _) in sorted(chosen.items()))
            or "no node where evicting lower-priority pods frees the cards")
        return wire.preemption_result(chosen)

    def prioritize(self, body) -> list[dict]:
        args = wire.extender_args(body)
        ask = request_of(args.pod, self.config, self.fleet)
        return wire.priority_list(self.source.scores(args.pod, ask, args.node_names))

    def bind(self, body) -> dict:
        b = wire.binding_args(body)
        who = f"{b.namespace}/{b.name}"
        if not self.source.wait_ready(self.ready_wait):
            return wire.binding_result(NOT_SYNCED)
        reserved = self.source.take_reservation(b.uid, b.namespace, b.name, b.node)
        if reserved is not None:
            pod, placement = reserved
            return self._write(b, pod, placement, True)
        pod = self._pod(b)
        if isinstance(pod, str):
            return wire.binding_result(pod)
        ask = request_of(pod, self.config, self.fleet)
        result = self.source.choose_and_assume(pod, ask, b.node)
        if result is None:
            return wire.binding_result(f"pod {who}: a binding is already being written")
        if isinstance(result, str):
            log.info("bind %s on %s refused: %s", who, b.node, result)
            return wire.binding_result(f"node {b.node}: {result}")
        return self._write(b, pod, result, ask.request is not None)

    def _pod(self, b: wire.BindingArgs):
        """The pod to bind, from the cache, else (or when our last write's outcome is
        unknown) from the API server."""
        who = f"{b.namespace}/{b.name}"
        pod, doubt = self.source.pending_pod(b.uid, b.namespace, b.name)
        if pod is not None and not doubt:
            return pod
        if doubt:
            state, status, pod = self.source.resolve(b.uid, b.namespace, b.name)
            if state == "bound":
                return f"pod {who} is already bound"
            if state == "unknown":
                return f"pod {who}: the outcome of an earlier binding is unknown"
        else:
            status, pod = self.source.read_pod(b.namespace, b.name)
        if pod is None:
            return f"pod {who}: " + ("not found" if status == 404 else f"cannot be read (HTTP {status})")
        if pod["metadata"].get("uid") != b.uid:
            return f"pod {who}: uid {b.uid} is gone"
        if (pod.get("spec") or {}).get("nodeName"):
            return f"pod {who} is already bound to {pod['spec']['nodeName']}"
        return pod

    def _write(self, b: wire.BindingArgs, pod: dict, p: Placement, mthreads: bool) -> dict:
        who = f"{b.namespace}/{b.name}"
        body = binding_body(b.namespace, b.name, b.uid, p, time.time_ns(), with_annotations=mthreads)
        status, message = post_binding(self.source.api, body)
        if status is None:
            # it may have happened: keep the share counted until a read tells
            self.source.bind_unknown(p.share, b.namespace, b.name)
            log.warning("bind %s: %s; outcome unknown, holding its cards until re-read", who, message)
            return wire.binding_result(f"binding {who}: outcome unknown: {message}")
        if 200 <= status < 300:
            self.source.bind_ok(p.share)
            devices = body["metadata"].get("annotations", {}).get(keys.ALLOCATED, "-")
            log.info("bound %s to %s: %s", who, p.node, devices)
            return wire.binding_result()
        self.source.bind_failed(p.share, pod)  # refused: nothing was written
        if status in (404, 409):  # gone, or someone else bound it: learn the truth now
            self.source.resolve(b.uid, b.namespace, b.name)
        log.info("bind %s: %s", who, message)
        return wire.binding_result(f"binding {who}: {message}")


def create_extender_app(config: Config, state_source) -> Flask:
    app = Flask("mthreads-extender")
    ext = Extender(config, state_source)
    app.extensions["mthreads_extender"] = ext

    def handle(fn):
        body = request.get_json(force=True, silent=True)
        try:
            return jsonify(fn(body))
        except wire.WireError as e:
            return jsonify({"Error": f"bad request: {e}"}), 400

    @app.post("/filter")
    def filter_():
        return handle(ext.filter)

    @app.post("/prioritize")
    def prioritize():
        return handle(ext.prioritize)

    @app.post("/preempt")
    def preempt():
        return handle(ext.preempt)

    @app.post("/bind")
    def bind():
        return handle(ext.bind)

    @app.get("/healthz")
    def healthz():
        return "ok\n", 200, {"Content-Type": "text/plain"}

    app.add_url_rule("/metrics", "metrics", metrics_page(lambda: state_source.state.nodes.values(),
                                                         state_source.bound))

    @app.get("/readyz")
    def readyz():
        ok = state_source.ready()
        return ("ok\n" if ok else "not synced\n"), 200 if ok else 503, {"Content-Type": "text/plain"}

    return app
