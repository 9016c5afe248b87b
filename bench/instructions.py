"""Part `instructions`: the webhook's and the bare app's instructions per request, under callgrind.

Wall-clock req/s on a shared 2-core machine moves by several points from run to
run (bench/webhook.py's noise floor); the number of instructions a request costs
does not. Both servers of the `webhook` part (`mthreads-webhook serve` and
bench/bare_app.py, same gunicorn settings, same TLS) run under
`valgrind --tool=callgrind`. For each cell, over 4 keep-alive HTTPS connections:
40 POSTs of warm-up (the TLS handshakes happen there), then the worker's counters
are zeroed (`callgrind_control -z`), 200 POSTs are sent, and the counters dumped
(`callgrind_control -d`): user-space instructions of the gunicorn worker, all its
threads, TLS included, kernel excluded, divided by 200.

`bare / this` is the bare app's count over the cell's: the share of the stack's
CPU-bound ceiling the webhook keeps, what the req/s goals ask for before the
kernel's share (the same for both servers, which pulls a req/s ratio up a little).

    python -m bench.instructions                    # this tree; prints, doc untouched
    python -m bench.run --parts instructions        # writes its section of docs/benchmarks.md
    python -m bench.instructions --instr-compare HEAD   # also the webhook as committed, side by side

`--instr-compare` takes a git revision (exported with `git archive`) or a source
directory; that tree's webhook and bare app run in the same session, so before
and after a change are measured side by side.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import debian, pods
from .report import Goal, Section, Table
from .webhook import (
    BARE,
    BARE_AGAIN,
    RPS_GOAL,
    WEBHOOK_CELLS,
    Server,
    _git_commit,
    _label,
    _server_settings,
    _versions,
    check_answers,
)

TITLE = "Webhook instructions per request (callgrind)"
ROOT = Path(__file__).resolve().parent.parent
CELLS = [BARE, *WEBHOOK_CELLS, BARE_AGAIN]  # bare first and last: its two counts show the noise
CONNECTIONS, WARMUP_POSTS, POSTS = 4, 40, 200
# Every cell measured this many times, in the same servers. Now and then one round reads about
# 5% higher (a rare event, a full garbage collection say, inside its window): the median is quoted.
ROUNDS = 3
READY_TIMEOUT = 180.0  # Python starts about 40× slower under callgrind
POST_TIMEOUT = 60.0
SETTLE = 0.3  # seconds after the last answer, so the worker finishes its last requests' tails


def add_arguments(g) -> None:
    g.add_argument("--instr-compare", action="append", default=[], metavar="REV_OR_DIR",
                   help="also measure the webhook and bare app of this git revision or source "
                        "tree, side by side (repeatable)")
    g.add_argument("--instr-posts", type=int, default=POSTS,
                   help="measured POSTs per cell (%(default)s)")


def _rounds(args) -> int:
    return getattr(args, "rounds", None) or ROUNDS


def estimate(args) -> float:
    trees = 1 + len(getattr(args, "instr_compare", []) or [])
    posts = getattr(args, "instr_posts", POSTS)
    # Measured: about 25 s to start both servers, 0.05 s a POST under callgrind.
    return trees * (25 + len(CELLS) * _rounds(args) * (1 + (WARMUP_POSTS + posts) * 0.05))


def _tools() -> tuple[str, str]:
    valgrind, control = debian.ensure("valgrind", "valgrind", "callgrind_control")
    return valgrind, control


def _valgrind_version(valgrind: str) -> str:
    r = subprocess.run([valgrind, "--version"], capture_output=True, text=True, timeout=30)
    return r.stdout.strip().replace("valgrind-", "")


def _tree(spec: str, work: Path) -> tuple[str, Path]:
    """(label, directory) of a tree to compare: a directory as it is, or a git revision."""
    path = Path(spec)
    if path.is_dir():
        return f"directory {path.name or spec}", path.resolve()
    out = work / f"tree-{len(list(work.glob('tree-*')))}"
    out.mkdir()
    # git archive reads the object store only: the repository's state is not touched.
    archive = subprocess.run(["git", "archive", spec], cwd=ROOT, capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise SystemExit(f"bench: --instr-compare {spec}: neither a directory nor a git "
                         f"revision: {archive.stderr.decode()[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True, timeout=120)
    rev = subprocess.run(["git", "rev-parse", "--short", spec], cwd=ROOT, capture_output=True,
                         text=True, timeout=30).stdout.strip()
    return f"{spec} ({rev})" if rev and rev != spec else spec, out


class Keepalive:
    """CONNECTIONS keep-alive HTTPS connections to one server, each driven by its own thread."""

    def __init__(self, server: Server):
        self.server = server
        self.conns = [http.client.HTTPSConnection("127.0.0.1", server.port, context=server.tls,
                                                  timeout=POST_TIMEOUT)
                      for _ in range(CONNECTIONS)]

    def post(self, path: str, body: bytes, total: int) -> None:
        """`total` POSTs, shared among the connections; each answer must be a 200."""
        errors: list[str] = []

        def send(conn: http.client.HTTPSConnection, n: int) -> None:
            try:
                for _ in range(n):
                    conn.request("POST", path, body=body,
                                 headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    raw = resp.read()
                    if resp.status != 200 or resp.getheader("Connection", "") == "close":
                        errors.append(f"HTTP {resp.status}: {raw[:200]!r}")
                        return
            except (OSError, http.client.HTTPException) as e:
                errors.append(repr(e))

        share = [total // CONNECTIONS + (i < total % CONNECTIONS) for i in range(CONNECTIONS)]
        threads = [threading.Thread(target=send, args=(c, n)) for c, n in zip(self.conns, share)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(POST_TIMEOUT * (total + 1))
        if errors or any(t.is_alive() for t in threads):
            raise RuntimeError(f"{self.server.name} {path}: {errors[:3] or 'client hung'}")

    def close(self) -> None:
        for c in self.conns:
            c.close()


class Counted:
    """A Server under callgrind; counts its one worker's instructions over a window."""

    def __init__(self, server: Server, control: str, out: Path):
        self.server, self.control, self.out = server, control, out

    def worker(self) -> int:
        workers = self.server.workers()
        if len(workers) != 1:
            raise RuntimeError(f"{self.server.name}: expected one gunicorn worker, have {workers}")
        return workers[0]

    def _command(self, flag: str) -> None:
        subprocess.run([self.control, flag, str(self.worker())], check=True,
                       capture_output=True, timeout=120)

    def instructions(self, run) -> int:
        """Zero the worker's counters, call `run`, dump them: the instructions in between."""
        pid = self.worker()
        before = set(self.out.glob(f"callgrind.{pid}.*"))
        self._command("-z")
        run()
        time.sleep(SETTLE)
        self._command("-d")
        dumps = sorted(set(self.out.glob(f"callgrind.{pid}.*")) - before,
                       key=lambda p: int(p.suffix[1:]))
        if not dumps:
            raise RuntimeError(f"{self.server.name}: callgrind wrote no dump")
        for line in dumps[-1].read_text(errors="replace").splitlines():
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
        raise RuntimeError(f"{self.server.name}: no totals in {dumps[-1]}")


def _measure_tree(label: str, cwd: Path, bodies: dict[str, bytes], certs: Path, work: Path,
                  valgrind: str, control: str, rounds: int, posts: int) -> dict[tuple, list[float]]:
    """Instructions per request of every cell, `rounds` times, for one source tree."""
    out = work / f"callgrind-{len(list(work.glob('callgrind-*')))}"
    out.mkdir()
    # --trace-children: valgrind then opens the vgdb FIFOs of a forked child too, which
    # callgrind_control needs to reach the gunicorn worker.
    wrapper = (valgrind, "--tool=callgrind", "--trace-children=yes",
               f"--callgrind-out-file={out}/callgrind.%p")
    servers = {}
    try:
        # Started one after the other: two Pythons starting under callgrind on 2 cores is slow.
        for name, module in (("webhook", ["webhook.cli", "serve"]), ("bare", ["bench.bare_app"])):
            servers[name] = Server(name, module, certs, None, out / f"{name}.log", wrapper=wrapper,
                                   cwd=cwd).start(READY_TIMEOUT)
        check_answers(servers, bodies)
        counted = {n: Counted(s, control, out) for n, s in servers.items()}
        results: dict[tuple, list[float]] = {cell: [] for cell in CELLS}
        for r in range(rounds):
            for cell in CELLS:
                name, variant, path = cell
                client = Keepalive(servers[name])
                try:
                    client.post(path, bodies[variant], WARMUP_POSTS)
                    total = counted[name].instructions(
                        lambda: client.post(path, bodies[variant], posts))
                finally:
                    client.close()
                results[cell].append(total / posts)
                print(f"bench: instructions: {label}: round {r + 1}/{rounds}: {_label(cell)}: "
                      f"{total / posts / 1e6:.3f} M/request", flush=True)
        return results
    finally:
        for s in servers.values():
            s.stop()


def measure(trees: list[tuple[str, Path]], rounds: int, posts: int) -> dict[str, dict]:
    """{tree label: {cell: [instructions per request, one per round]}}."""
    valgrind, control = _tools()
    work = Path(tempfile.mkdtemp(prefix="bench-instructions-"))
    try:
        certs = work / "certs"
        subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs)],
                       check=True, capture_output=True, timeout=60)
        bodies = {v: pods.body(v) for v in pods.VARIANTS}
        return {label: _measure_tree(label, cwd, bodies, certs, work, valgrind, control, rounds,
                                     posts)
                for label, cwd in trees}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _m(x: float) -> str:
    return f"{x / 1e6:.3f} M"


def _counts(values: list[float]) -> str:
    """The median, and the range over rounds when there are several."""
    median = statistics.median(values)
    if len(values) < 2:
        return _m(median)
    return f"{_m(median)} ({min(values) / 1e6:.3f}–{max(values) / 1e6:.3f})"


def run(args) -> Section:
    rounds, posts = _rounds(args), args.instr_posts
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="bench-instructions-trees-"))
    try:
        trees = [("this tree", ROOT)] + [_tree(spec, work) for spec in args.instr_compare]
        results = measure(trees, rounds, posts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started

    def bare(label: str) -> float:
        r = results[label]
        return statistics.median(r[BARE] + r[BARE_AGAIN])

    labels = [label for label, _ in trees]
    headers = ["server, endpoint, pod"]
    for label in labels:
        at = "" if label == "this tree" else f" at {label}"
        headers += [f"instructions / request{at}", f"bare / this{at}"]
    rows, goals = [], []
    for cell in CELLS:
        row = [_label(cell)]
        for label in labels:
            values = results[label][cell]
            row += [_counts(values),
                    "" if cell == BARE else f"{bare(label) / statistics.median(values):.1%}"]
        rows.append(row)
        if cell in WEBHOOK_CELLS:
            share = bare("this tree") / statistics.median(results["this tree"][cell])
            goal = RPS_GOAL[cell[1]]
            goals.append(Goal(f"{_label(cell)}: bare's instructions / this ≥ {goal:.0%}",
                              f"{share:.1%}", share >= goal))
    plural = "s" if rounds > 1 else ""
    table = Table(headers, rows, f"Instructions per request: median of {rounds} round{plural} of "
                                 f"{posts} POSTs (in brackets: lowest–highest)")
    conditions = [
        ("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
        ("commit", _git_commit()),
        ("software", f"valgrind {_valgrind_version(_tools()[0])} (callgrind), Python "
                     f"{sys.version.split()[0]}, {_versions()}, {ssl.OPENSSL_VERSION}"),
        ("servers", f"{_server_settings()}, under callgrind, not pinned; the webhook as "
                    f"`mthreads-webhook serve` with the default config; the bare app "
                    f"(bench/bare_app.py) through the same `WebhookServer` settings"),
        ("load", f"{CONNECTIONS} keep-alive HTTPS connections, POSTs of bench/pods.py's bodies "
                 f"(the bare app gets the Mthreads one); per cell {WARMUP_POSTS} POSTs of warm-up "
                 f"with the TLS handshakes, then {posts} counted; {rounds} round{plural}, "
                 f"every cell once a round, bare first and last; {elapsed / 60:.1f} min"),
        ("count", "user-space instructions (callgrind's Ir) of the gunicorn worker, all "
                  "threads, between `callgrind_control -z` and `-d`; bare's count is the median "
                  "of its two rows' rounds"),
    ]
    if len(labels) > 1:
        conditions.append(("trees", "this tree: the working tree; compared with "
                                    + ", ".join(labels[1:]) + ", run from their own files "
                                    "(webhook and bare app alike) in the same session"))
    return Section(
        part="instructions", title=TITLE,
        intro="The servers of the part above, under `valgrind --tool=callgrind`: what each request "
              "costs the worker in instructions, which a busy neighbour does not move. `bare / "
              "this` is the share of the stack's CPU-bound ceiling the webhook keeps. Now and "
              "then a round reads about 5% higher (a rare event, a full garbage collection say, "
              "inside its window), so the median over rounds is quoted.",
        conditions=conditions, tables=[table], goals=goals)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.instructions",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, help=f"rounds (default {ROUNDS})")
    add_arguments(p)
    args = p.parse_args(argv)
    print(f"bench: instructions: about {estimate(args) / 60:.0f} min", flush=True)
    print(run(args).markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
