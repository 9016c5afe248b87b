"""`python -m webhook.allocator`: the same flags as `mthreads-webhook allocate`."""

from __future__ import annotations

import argparse
import sys

from ..config import ConfigError, load_config
from .main import run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mthreads-webhook allocate",
                                description="Place Mthreads GPU pods on nodes and cards.")
    p.add_argument("--config", help="the YAML configuration (default: all defaults)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    p.add_argument("--namespace", help="namespace of the Lease (default: the pod's, else kube-system)")
    p.add_argument("--metrics-bind", default="0.0.0.0:9090", help="HOST:PORT for /metrics and /healthz")
    args = p.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run(config, args.kubeconfig, args.namespace, args.metrics_bind)


if __name__ == "__main__":
    sys.exit(main())
