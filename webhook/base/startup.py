"""A command's start-up failure: the error every layer may raise, with its exit code
(cli/main.py turns it into one line on stderr).

Exit codes, as kubectl and most Unix tools use them: 2 when what was asked cannot be
understood (a bad flag, a malformed address, a config file that fails its check), 1 when
it was understood but cannot be done here (a port in use, a certificate that does not
load, no cluster found, an API server that refuses or cannot be reached).
"""

from __future__ import annotations

USAGE = 2
FAILED = 1


class StartupError(Exception):
    """A command cannot start; the message names what is wrong, in one line."""

    def __init__(self, message: str, exit_code: int = FAILED):
        super().__init__(message)
        self.exit_code = exit_code
