"""The `mthreads-webhook` command: serve, certs, allocate."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import ConfigError, load_config


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mthreads-webhook",
                                description="Mthreads GPU sharing for Kubernetes")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the admission webhook (HTTPS, under gunicorn)")
    s.add_argument("--config", help="config file (SPEC 2 shape); default: all defaults")
    s.add_argument("--bind", default="0.0.0.0:8443", help="HOST:PORT (default %(default)s)")
    s.add_argument("--cert-file", default="certs/tls.crt")
    s.add_argument("--key-file", default="certs/tls.key")
    s.add_argument("--workers", type=_positive, default=1, help="processes (default %(default)s)")
    s.add_argument("--threads", type=_positive, default=4, help="threads per worker (default %(default)s)")
    s.add_argument("--keepalive", type=int, default=120,
                   help="seconds an idle connection stays open (default %(default)s)")
    s.add_argument("--access-log", action="store_true", help="log every request")

    c = sub.add_parser("certs", help="make a CA and a serving certificate")
    c.add_argument("--out", default="certs", help="directory (default %(default)s)")
    c.add_argument("--service", default="mthreads-webhook")
    c.add_argument("--namespace", default="kube-system")
    c.add_argument("--days", type=int, default=365, help="serving certificate lifetime")
    c.add_argument("--new-ca", action="store_true", help="replace an existing CA in --out")

    a = sub.add_parser("allocate", help="run the allocator")
    a.add_argument("--config")
    a.add_argument("--kubeconfig", help="default: in-cluster config")
    a.add_argument("--namespace", help="namespace of the Lease (default: the pod's, else kube-system)")
    a.add_argument("--metrics-bind", default="0.0.0.0:9090", help="HOST:PORT for /metrics, /healthz")
    a.add_argument("--bind-threads", type=_positive,
                   help="pods/binding writes sent at once (default: binder.DEFAULT_THREADS, 32)")

    e = sub.add_parser("extender", help="run the kube-scheduler extender (it chooses the cards)")
    e.add_argument("--config")
    e.add_argument("--kubeconfig", help="default: in-cluster config")
    e.add_argument("--bind", default="0.0.0.0:8888", help="HOST:PORT, plain HTTP (default %(default)s)")
    from .observe import cards_command
    cards_command.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # the allocator's retries say enough
    try:
        return (_COMMANDS.get(args.command) or args.run)(args)
    except ConfigError as e:
        print(f"mthreads-webhook: config: {e}", file=sys.stderr)
        return 2


def _serve(args) -> int:
    from .serve import ServeOptions, serve
    from .tls import CertificateError
    config = load_config(args.config)
    for name in ("workers", "threads", "keepalive"):
        if getattr(args, name) < 1:
            print(f"mthreads-webhook: --{name} must be at least 1", file=sys.stderr)
            return 2
    try:
        serve(config, ServeOptions(bind=args.bind, cert_file=args.cert_file, key_file=args.key_file,
                                   workers=args.workers, threads=args.threads,
                                   keepalive=args.keepalive, access_log=args.access_log))
    except CertificateError as e:
        print(f"mthreads-webhook: {e}", file=sys.stderr)
        return 1
    return 0


def _certs(args) -> int:
    from .certs import write_certs
    paths = write_certs(args.out, args.service, args.namespace, new_ca=args.new_ca, days=args.days)
    print(f"wrote {', '.join(paths.values())}")
    return 0


def _allocate(args) -> int:
    from .allocator.main import run
    return run(load_config(args.config), args.kubeconfig, args.namespace, args.metrics_bind,
               args.bind_threads)


def _extender(args) -> int:
    from .extender.main import run
    return run(load_config(args.config), args.kubeconfig, args.bind)


_COMMANDS = {"serve": _serve, "certs": _certs, "allocate": _allocate, "extender": _extender}

if __name__ == "__main__":
    sys.exit(main())
