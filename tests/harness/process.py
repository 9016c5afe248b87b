"""The one process runner of the tests: a subprocess with its output in a log file (a load's
report on a pipe: ReportingProcess), stopped by its own PID (SIGTERM, then SIGKILL if it does
not exit in time), never by name."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def stop_process(proc: subprocess.Popen, timeout: float = 10.0, kill=None) -> int:
    """SIGTERM the process by its PID, then SIGKILL it if it does not exit in time; its code.
    `kill`, if given, is called instead of the SIGKILL (a podman client's container is killed
    through podman: SIGKILL on the client would leave the container running)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            (kill or proc.kill)()
            proc.wait(30 if kill else None)
    return proc.returncode


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class LoggedProcess:
    """`args` run from the repository's root, stdout and stderr appended to `log_path`."""

    def __init__(self, args: list[str], log_path: Path, new_session: bool = False,
                 env: dict[str, str] | None = None):
        self.args, self.log_path, self.new_session = list(args), Path(log_path), new_session
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"} if env is None else env
        self.proc: subprocess.Popen | None = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.args, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, start_new_session=self.new_session)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL by PID, reaped."""
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM then SIGKILL; the exit code (None if never started)."""
        return None if self.proc is None else stop_process(self.proc, timeout)

    def workers(self) -> list[int]:
        """The PIDs of the processes it forked (a gunicorn master's workers)."""
        pid = self.proc.pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)


class ReportingProcess:
    """A load of the tests in a child Python (`python -m <module> <args>`, from the repository's
    root), so that its threads take no GIL from what is timed: it prints `ready` once its load
    is on, runs until SIGTERM (by PID) or its own bound, then prints what it did as one JSON
    line, which stop() returns."""

    def __init__(self, module: str, args: list[str], ready: str, what: str):
        self.args = [sys.executable, "-m", module, *args]
        self.ready, self.what = ready, what
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float):
        self.proc = subprocess.Popen(self.args, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True)
        # The child prints one whole line, flushed: readable means the line is there.
        if not select.select([self.proc.stdout], [], [], timeout)[0] \
                or self.proc.stdout.readline() != f"{self.ready}\n":
            self.stop()
            raise RuntimeError(f"{self.what} did not start within {timeout:g} s")
        return self

    def stop(self, timeout: float = 45.0) -> dict:
        """SIGTERM by PID (SIGKILL if it does not exit in time); its last JSON line, {} if none."""
        if self.proc is None:
            return {}
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=10)
        lines = [ln for ln in (out or "").splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
