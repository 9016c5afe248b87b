"""The `mthreads-webhook` command: its flags, a bad start reported in one line, and which
front-end each subcommand runs (docs/architecture.md)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    # Before the imports: the extender's socket listens at once (base/listen.py).
    from ..base.listen import listen_early
    listen_early(sys.argv[1:] if argv is None else argv)
    from .main import main as run
    return run(argv)


__all__ = ["main"]
