"""The `mthreads-webhook` command: its flags, a bad start reported in one line, and which
front-end each subcommand runs (docs/architecture.md)."""

from .main import main

__all__ = ["main"]
