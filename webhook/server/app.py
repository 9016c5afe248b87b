"""The Flask app: decode an AdmissionReview, call the rules, encode the answer."""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length

from ..admission import review as rv
from ..admission.decide import decide
from ..admission.validate import Rules
from ..metrics.review_metrics import WebhookMetrics
from ..model.config import Config

MAX_BODY = rv.MAX_BODY

log = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, str]]


def create_app(config: Config, readiness: Readiness | None = None, not_after=None) -> Flask:
    """`readiness` reports whether a valid serving certificate is loaded (see tls.py)."""
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    rules = Rules.of(config)
    metrics = WebhookMetrics(not_after)
    latency = {e: metrics.latency.labels(e) for e in ("mutate", "validate")}  # bound once
    # (endpoint, result) -> its counter, bound when first counted (.labels() costs a lock and
    # a lookup per call); not up front, so a series still appears only once it has counted.
    counters: dict[tuple[str, str], object] = {}

    def admit(endpoint: str, mutating: bool) -> Response:
        started = time.perf_counter()
        status, body, result = _answer(rules, mutating, metrics, endpoint)
        counter = counters.get((endpoint, result))
        if counter is None:
            counter = counters[(endpoint, result)] = metrics.requests.labels(endpoint, result)
        counter.inc()
        latency[endpoint].observe(time.perf_counter() - started)
        # content_type, not mimetype: the same header without werkzeug working it out.
        return Response(json.dumps(body), status=status, content_type="application/json")

    app.add_url_rule("/mutate", "mutate", lambda: admit("mutate", True), methods=["POST"])
    app.add_url_rule("/validate", "validate", lambda: admit("validate", False), methods=["POST"])

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        ok, reason = readiness() if readiness else (True, "no TLS served by this app")
        return Response(f"{'ok' if ok else 'not ready'}: {reason}\n", status=200 if ok else 503,
                        mimetype="text/plain")

    @app.get("/metrics")
    def metrics_page() -> Response:
        return Response(metrics.scrape(), mimetype=CONTENT_TYPE_LATEST)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        return Response(json.dumps({"error": e.description or e.name}), status=e.code,
                        mimetype="application/json")

    return app


def _body(environ: dict) -> bytes:
    """The request's body; raises 413 past MAX_BODY, unread."""
    length = get_content_length(environ)
    if length and length <= MAX_BODY and "wsgi.input_terminated" in environ:
        # gunicorn ends the body at its Content-Length: one read gets it. get_data would read
        # it through werkzeug's MAX_BODY guard, a Python loop of small reads (3% of a request).
        return environ["wsgi.input"].read(length)
    if length:
        return request.get_data(cache=False)  # too long: werkzeug answers 413 unread
    # Chunked: werkzeug would cut it at MAX_BODY without a word, and the cut JSON read as
    # "not JSON"; one byte more tells a body that is too long.
    body = environ["wsgi.input"].read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise RequestEntityTooLarge(f"the chunked body is over the limit of {MAX_BODY} bytes")
    return body


def _answer(rules: Rules, mutating: bool, metrics: WebhookMetrics,
            endpoint: str) -> tuple[int, dict, str]:
    """(HTTP status, body, result label) for one admission POST."""
    environ = request.environ
    # The API server sends exactly this; anything else is parsed (parameters, case) to decide.
    if environ.get("CONTENT_TYPE") != "application/json" and request.mimetype != "application/json":
        return 415, {"error": f"content type {request.mimetype or 'none'!r} is not "
                              f"application/json"}, "bad_request"
    try:
        body = _body(environ)
    except OSError as e:  # the client stopped sending: reset, or its read budget spent
        return 408, {"error": f"request body not received in full: {e}"}, "bad_request"
    try:
        review = rv.decode(body)
    except rv.BadReview as e:
        return e.status, {"error": e.message}, "bad_request"
    try:
        outcome = decide(review, rules, mutating)
    except Exception:  # a bug must answer the API server, not kill the worker
        log.exception("internal error on review %s", review.uid)
        return 200, rv.deny(review.api_version, review.uid,
                            "internal error in the Mthreads webhook; see its log", 500), "error"
    if outcome.rule is not None:
        metrics.denials.labels(endpoint, str(outcome.rule)).inc()
    return 200, outcome.response, outcome.result
