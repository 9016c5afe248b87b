"""The ceiling of the stack: a bare Flask app under the webhook's own gunicorn settings.

It parses the AdmissionReview with json.loads and allows it, nothing else: no
rules, no patch, no metrics. It is served by `webhook.server.run.WebhookServer`
itself (same worker class, workers, threads, keep-alive, timeouts, TLS with the
same one-context hook), only `load()` returns this app instead of the webhook.

    python -m bench.bare_app --bind 127.0.0.1:PORT --cert-file F --key-file F
"""

from __future__ import annotations

import argparse
import json

from flask import Flask, Response, request

from webhook.model.config import Config
from webhook.server.run import ServeOptions, WebhookServer
from webhook.server.tls import ServingCertificate


def create_bare_app() -> Flask:
    app = Flask(__name__)

    def allow() -> Response:
        review = json.loads(request.get_data(cache=False))
        body = {"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                "response": {"uid": review["request"]["uid"], "allowed": True}}
        return Response(json.dumps(body), mimetype="application/json")

    app.add_url_rule("/mutate", "mutate", allow, methods=["POST"])
    app.add_url_rule("/validate", "validate", allow, methods=["POST"])
    app.add_url_rule("/readyz", "readyz", lambda: Response("ok\n", mimetype="text/plain"))
    return app


class BareServer(WebhookServer):
    """WebhookServer's settings, the bare app."""

    def load_config(self) -> None:
        super().load_config()
        self.cfg.set("proc_name", "bench-bare-app")

    def load(self):
        return create_bare_app()


def main(argv: list[str] | None = None) -> int:
    defaults = ServeOptions()
    p = argparse.ArgumentParser(description="bare Flask app under the webhook's gunicorn settings")
    p.add_argument("--bind", required=True)
    p.add_argument("--cert-file", required=True)
    p.add_argument("--key-file", required=True)
    p.add_argument("--workers", type=int, default=defaults.workers)
    p.add_argument("--threads", type=int, default=defaults.threads)
    p.add_argument("--keepalive", type=int, default=defaults.keepalive)
    args = p.parse_args(argv)
    options = ServeOptions(bind=args.bind, cert_file=args.cert_file, key_file=args.key_file,
                           workers=args.workers, threads=args.threads, keepalive=args.keepalive)
    certificate = ServingCertificate(options.cert_file, options.key_file)
    BareServer(Config(), options, certificate).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
