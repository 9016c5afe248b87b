"""The one place a command's start-up failure becomes one line on stderr and an exit code.

Exit codes, as kubectl and most Unix tools use them: 2 when what was asked cannot be
understood (a bad flag, a malformed address, a config file that fails its check), 1 when
it was understood but cannot be done here (a port in use, a certificate that does not
load, no cluster found, an API server that refuses or cannot be reached).
"""

from __future__ import annotations

import sys

USAGE = 2
FAILED = 1


class StartupError(Exception):
    """A command cannot start; the message names what is wrong, in one line."""

    def __init__(self, message: str, exit_code: int = FAILED):
        super().__init__(message)
        self.exit_code = exit_code


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def report(message: str, exit_code: int) -> int:
    print(f"mthreads-webhook: {one_line(message)}", file=sys.stderr)
    return exit_code


def run_command(command, args) -> int:
    """Run `command(args)`; the project's start-up errors end it with their one line."""
    from .config import ConfigError
    from .server.tls import CertificateError
    try:
        return command(args)
    except StartupError as e:
        return report(str(e), e.exit_code)
    except ConfigError as e:
        return report(f"config: {e}", USAGE)
    except CertificateError as e:
        return report(str(e), FAILED)
