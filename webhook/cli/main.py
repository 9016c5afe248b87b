"""The `mthreads-webhook` command: serve, certs, allocate, extender, cards."""

from __future__ import annotations

import argparse
import logging
import sys

from ..base import listen
from ..base.listen import check_bind, check_loopback
from ..base.startup import FAILED, USAGE, StartupError
from ..model.config import load_config
from . import cards_command


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


KUBECONFIG_HELP = "default: $KUBECONFIG, else the in-cluster config, else ~/.kube/config"


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
    c.add_argument("--days", type=_positive, default=365, help="serving certificate lifetime")
    c.add_argument("--new-ca", action="store_true", help="replace an existing CA in --out")

    a = sub.add_parser("allocate", help="run the allocator")
    a.add_argument("--config")
    a.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    a.add_argument("--namespace", help="namespace of the Lease (default: the pod's, else kube-system)")
    a.add_argument("--metrics-bind", default="0.0.0.0:9090", help="HOST:PORT for /metrics, /healthz")
    a.add_argument("--bind-threads", type=_positive,
                   help="pods/binding writes under way at once (default: binder.DEFAULT_WRITES, 32)")

    e = sub.add_parser("extender", help="run the kube-scheduler extender (it chooses the cards)")
    e.add_argument("--config")
    e.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    e.add_argument("--bind", default=listen.DEFAULT_BIND,
                   help="loopback HOST:PORT for kube-scheduler's calls, plain HTTP (default %(default)s)")
    e.add_argument("--metrics-bind", default="",
                   help="HOST:PORT for GET /metrics, /healthz, /readyz only (default: none; "
                        "they are served on --bind too)")
    cards_command.add_parser(sub, KUBECONFIG_HELP)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # the allocator's retries say enough
    return run_command(_COMMANDS[args.command], args)


def _cluster(args, probe: bool = True) -> str | None:
    """Find the cluster and (for the long-running commands) check that it answers; the
    kubeconfig to load, None for in-cluster."""
    from .cluster_probe import check_cluster
    from .kubeconfig import find_cluster
    source = find_cluster(args.kubeconfig)
    if probe:
        check_cluster(source)
    return source.kubeconfig


def _serve(args) -> int:
    from ..server.run import ServeOptions, serve
    from ..server.tls import ServingCertificate
    config = load_config(args.config)
    for name in ("workers", "threads", "keepalive"):
        if getattr(args, name) < 1:
            raise StartupError(f"--{name} must be at least 1", USAGE)
    ServingCertificate(args.cert_file, args.key_file)  # raises CertificateError, before gunicorn
    check_bind("--bind", args.bind)
    serve(config, ServeOptions(bind=args.bind, cert_file=args.cert_file, key_file=args.key_file,
                               workers=args.workers, threads=args.threads,
                               keepalive=args.keepalive, access_log=args.access_log))
    return 0


def _certs(args) -> int:
    from ..server.certs import write_certs
    try:
        paths = write_certs(args.out, args.service, args.namespace, new_ca=args.new_ca,
                            days=args.days)
    except OSError as e:
        raise StartupError(f"--out {args.out}: cannot write: {e.strerror or e}") from None
    except ValueError as e:  # a ca.crt or ca.key in --out that does not load
        raise StartupError(f"--out {args.out}: the CA there cannot be used: {e}") from None
    print(f"wrote {', '.join(paths.values())}")
    return 0


def _allocate(args) -> int:
    from ..allocator.main import run
    config = load_config(args.config)
    check_bind("--metrics-bind", args.metrics_bind)
    return run(config, _cluster(args), args.namespace, args.metrics_bind, args.bind_threads)


def _extender(args) -> int:
    from ..extender.main import run
    config = load_config(args.config)
    if not listen.holds(args.bind):  # else it listens already (base/listen.py)
        check_bind("--bind", args.bind)
    check_loopback("--bind", args.bind)
    if args.metrics_bind:
        check_bind("--metrics-bind", args.metrics_bind)
    return run(config, _cluster(args), args.bind, args.metrics_bind or None)


def _cards(args) -> int:
    # No start-up probe: the command's own lists say in one line what the API server answered.
    return cards_command.run(load_config(args.config), args, lambda: _cluster(args, probe=False))


_COMMANDS = {"serve": _serve, "certs": _certs, "allocate": _allocate, "extender": _extender,
             "cards": _cards}



def one_line(text: str) -> str:
    return " ".join(str(text).split())


def report(message: str, exit_code: int) -> int:
    print(f"mthreads-webhook: {one_line(message)}", file=sys.stderr)
    return exit_code


def run_command(command, args) -> int:
    """Run `command(args)`; the project's start-up errors end it with their one line."""
    from ..model.config import ConfigError
    from ..server.tls import CertificateError
    try:
        return command(args)
    except StartupError as e:
        return report(str(e), e.exit_code)
    except ConfigError as e:
        return report(f"config: {e}", USAGE)
    except CertificateError as e:
        return report(str(e), FAILED)
