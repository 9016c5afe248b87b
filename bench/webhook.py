"""Part `webhook`: the admission webhook against the bare stack it runs on.

Two servers run at once, both pinned to one core (`taskset`): the project's
webhook (`mthreads-webhook serve`, default settings) and bench/bare_app.py, a
Flask app that only parses the review and allows it, under the very same
gunicorn settings (webhook.server.run.WebhookServer with another app). wrk, pinned
to another core with one thread, POSTs a Deployment's pod (bench/pods.py) over
HTTPS with keep-alive, as the API server does.

Cells, at each concurrency: the webhook's /mutate and /validate for the
Mthreads pod and for the plain pod, and the bare app twice (A B B A B B): every
webhook cell runs next to a bare run, and the bare app against itself shows
how far a ratio moves by chance on this machine (the noise floor). Every round
runs each cell once, the order rotated from round to round; a webhook cell's
ratio is taken within its round, against the mean of that round's two bare
runs, and the doc quotes the median over rounds with the middle half of them.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.kube import free_ports

from . import debian, pods
from .report import Goal, Section, Table

TITLE = "Webhook against the bare stack"
HERE = Path(__file__).resolve().parent
LUA = HERE / "post.lua"

# (name, variant, path). The bare app answers both paths alike; it gets the Mthreads body.
BARE = ("bare", "mthreads", "/mutate")
BARE_AGAIN = ("bare", "mthreads", "/validate")
WEBHOOK_CELLS = [("webhook", "mthreads", "/mutate"), ("webhook", "mthreads", "/validate"),
                 ("webhook", "plain", "/mutate"), ("webhook", "plain", "/validate")]
# A B B A B B: rotated each round, a webhook cell is always next to a bare run.
CELLS = [BARE, *WEBHOOK_CELLS[:2], BARE_AGAIN, *WEBHOOK_CELLS[2:]]
RPS_GOAL = {"mthreads": 0.80, "plain": 0.90}  # webhook req/s / bare req/s, at every concurrency
P99_GOAL = 1.5  # webhook p99 / bare p99, at the lowest concurrency
ROUNDS, DURATION, WARMUP = 13, 3, 2  # defaults: about 9 minutes; wrk takes whole seconds
# Slow clients (issue 17): (dribbling connections, loopback peers they come from); every real
# call made meanwhile, on a new connection with its TLS handshake, within SLOW_CALL_GOAL s.
SLOW_LOADS = ((32, 1), (256, 4))
SLOW_CALLS, SLOW_CALL_GOAL = 10, 1.0
# One peer flooding big reviews (issue 32, item 6): connections from one loopback address, each
# sending 2.5 MB reviews back to back; every call of another peer meanwhile, on a new
# connection with its TLS handshake, within FLOOD_CALL_GOAL s.
FLOOD_LOADS = (16, 32)
FLOOD_CALLS, FLOOD_CALL_GOAL = 20, 1.0
# Peers holding the slots (issue 46, finding 3): loopback addresses asking for all 1,000
# connection slots between them (kept alive after one review, a few silent ones opened again
# when cut off); every call of another peer meanwhile, on a new connection, within HOG_CALL_GOAL s.
HOG_LOADS = (2, 4)
HOG_CALLS, HOG_CALL_GOAL = 20, 1.0
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 25.0


def add_arguments(g) -> None:
    g.add_argument("--webhook-concurrency", default="4,32",
                   help="wrk connections, comma-separated (%(default)s); the first is the p99 goal's")
    g.add_argument("--webhook-server-cpu", type=int, default=0, help="core for both servers (%(default)s)")
    g.add_argument("--webhook-client-cpu", type=int, default=1, help="core for wrk (%(default)s)")
    g.add_argument("--webhook-raw", type=Path, help="also write every run's figures to this JSON file")


def _concurrencies(args) -> list[int]:
    return [int(c) for c in str(args.webhook_concurrency).split(",") if c.strip()]


def _defaults(args) -> None:
    args.rounds = args.rounds or ROUNDS
    args.duration = max(1, round(args.duration or DURATION))
    args.warmup = max(1, round(WARMUP if args.warmup is None else args.warmup))


def estimate(args) -> float:
    _defaults(args)
    per_run = args.duration + 0.4
    return (len(CELLS) * (args.warmup + 0.4) + args.rounds * len(_concurrencies(args))
            * len(CELLS) * per_run + 10 + len(SLOW_LOADS) * (4 + SLOW_CALLS * 0.3)
            + len(FLOOD_LOADS) * (10 + FLOOD_CALLS * 0.3) + len(HOG_LOADS) * (15 + HOG_CALLS * 0.3))


# --- wrk ---------------------------------------------------------------------------------

def ensure_wrk() -> str:
    """wrk from Debian's package (with the Lua scripting the bench's post.lua needs)."""
    return debian.ensure("wrk", "wrk")[0]


def wrk_version(wrk: str) -> str:
    r = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10)
    first = (r.stdout or r.stderr).splitlines()[0] if (r.stdout or r.stderr) else "wrk"
    return first.split(" [")[0].replace("wrk ", "")


@dataclass
class Run:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    cpu_ms: float = 0.0  # the server's worker CPU time per request
    core_share: float = 0.0  # the worker's CPU time over the wall time: how much core it got
    others: float = 0.0  # the share of the server core busy with anything but the server


def run_wrk(wrk: str, cpu: int, url: str, body: Path, connections: int, seconds: int) -> Run:
    cmd = ["taskset", "-c", str(cpu), wrk, "-t1", f"-c{connections}", f"-d{seconds}s",
           "--timeout", "5s", "-s", str(LUA), url, "--", str(body)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("BENCH ")), None)
    if r.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({r.returncode}) on {url}:\n{r.stdout}\n{r.stderr}")
    d = json.loads(line[len("BENCH "):])
    errors = d["connect"] + d["read"] + d["write"] + d["status"] + d["timeout"]
    return Run(rps=d["requests"] / (d["duration_us"] / 1e6), p50_ms=d["p50_us"] / 1000,
               p99_ms=d["p99_us"] / 1000, requests=d["requests"], errors=errors)


# --- servers -----------------------------------------------------------------------------

class Server:
    """One gunicorn server on 127.0.0.1, pinned to a core; stopped by its PID."""

    def __init__(self, name: str, module: list[str], certs: Path, cpu: int | None, log: Path,
                 wrapper: tuple[str, ...] = (), cwd: Path | None = None):
        """`cpu` None: not pinned; `wrapper` runs Python under it (valgrind, for
        bench/instructions.py); `cwd` another source tree to import the modules from."""
        self.name = name
        self.port = free_ports(1)[0]
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = certs / "ca.crt"
        self.log = log
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        self.argv = [*pin, *wrapper, sys.executable, "-m", *module,
                     "--bind", f"127.0.0.1:{self.port}",
                     "--cert-file", str(certs / "tls.crt"), "--key-file", str(certs / "tls.key")]
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.tls = ssl.create_default_context(cafile=str(self.ca))

    def start(self, timeout: float = READY_TIMEOUT) -> "Server":
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        with open(self.log, "ab") as log:  # taskset execs: the PID is gunicorn's master
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.cwd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; "
                                   f"log:\n{self.log.read_text()[-2000:]}")
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready in {timeout:.0f} s")

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls, timeout=5)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def tls_version(self) -> str:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as raw:
            with self.tls.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return f"{s.version()} {s.cipher()[0]}"

    def workers(self) -> list[int]:
        pid = self.proc.pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def cpu_seconds(self, with_master: bool = False) -> float:
        """utime + stime of the workers so far (all their threads, live or gone)."""
        total = 0
        for pid in self.workers() + ([self.proc.pid] if with_master else []):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def memory(self) -> list[tuple[int, int, int]]:
        """(pid, VmRSS KiB, VmHWM KiB) of each worker."""
        out = []
        for pid in self.workers():
            fields = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
            out.append((pid, int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])))
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


# --- checks and conditions ---------------------------------------------------------------

def check_answers(servers: dict[str, Server], bodies: dict[str, bytes]) -> dict[tuple, int]:
    """Each cell answers 200 with what it should; returns the response sizes."""
    sizes = {}
    for name, variant, path in CELLS:
        status, raw = servers[name].request("POST", path, bodies[variant])
        if status != 200:
            raise RuntimeError(f"{name} {path} {variant}: HTTP {status}: {raw[:300]!r}")
        resp = json.loads(raw)["response"]
        want_patch = name == "webhook" and variant == "mthreads" and path == "/mutate"
        if resp.get("allowed") is not True or ("patch" in resp) != want_patch:
            raise RuntimeError(f"{name} {path} {variant}: unexpected answer {resp}")
        sizes[(name, variant, path)] = len(raw)
    return sizes


def _core_times(cpu: int) -> tuple[float, float]:
    """(total, busy) seconds of one core since boot, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        parts = line.split()
        if parts[0] == f"cpu{cpu}":
            v = [int(x) for x in parts[1:9]]
            tick = os.sysconf("SC_CLK_TCK")
            return sum(v) / tick, (sum(v) - v[3] - v[4]) / tick  # less idle and iowait
    raise RuntimeError(f"no cpu{cpu} in /proc/stat")


def _steal() -> dict[int, tuple[int, int]]:
    """Per core: (total jiffies, steal jiffies)."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        parts = line.split()
        if parts[0].startswith("cpu") and parts[0] != "cpu":
            values = [int(v) for v in parts[1:]]
            out[int(parts[0][3:])] = (sum(values[:8]), values[7] if len(values) > 7 else 0)
    return out


def _versions() -> str:
    from importlib.metadata import version
    return ", ".join(f"{p} {version(p)}" for p in ("flask", "werkzeug", "gunicorn",
                                                   "prometheus-client"))


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _server_settings() -> str:
    """The gunicorn settings webhook.server.run applies by default (both servers run with them)."""
    from webhook.model.config import Config
    from webhook.server.run import ServeOptions, WebhookServer
    cfg = WebhookServer(Config(), ServeOptions(), certificate=None).cfg
    return (f"gunicorn {cfg.worker_class_str}, {cfg.workers} worker × {cfg.threads} threads, "
            f"keep-alive {cfg.keepalive} s, timeout {cfg.timeout} s")


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return f"{head}{' with uncommitted changes' if dirty else ''}" if head else "?"


# --- the part ----------------------------------------------------------------------------

def _label(cell: tuple) -> str:
    name, variant, path = cell
    if cell == BARE:
        return "bare Flask app"
    if cell == BARE_AGAIN:
        return "bare Flask app again (noise floor)"
    return f"webhook `{path}`, {'Mthreads' if variant == 'mthreads' else 'plain'} pod"


def _rps(x: float) -> str:
    return f"{x:,.0f}"


def _spread(values: list[float], fmt) -> str:
    """The median, and the middle half of the values."""
    if len(values) < 4:
        return fmt(statistics.median(values))
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return f"{fmt(statistics.median(values))} ({fmt(q1)}–{fmt(q3)})"


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _times(x: float) -> str:
    return f"{x:.2f}×"


def run(args) -> Section:
    _defaults(args)
    concurrencies = _concurrencies(args)
    if args.webhook_server_cpu == args.webhook_client_cpu:
        raise SystemExit("bench: --webhook-server-cpu and --webhook-client-cpu must differ")
    cpus = os.sched_getaffinity(0)
    if not {args.webhook_server_cpu, args.webhook_client_cpu} <= cpus:
        raise SystemExit(f"bench: cores {args.webhook_server_cpu} and {args.webhook_client_cpu} are not both "
                         f"available (have {sorted(cpus)})")
    wrk = ensure_wrk()
    settings = _server_settings()

    work = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    own_affinity = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {args.webhook_client_cpu})  # this runner stays off the servers' core
    servers: dict[str, Server] = {}
    try:
        certs = work / "certs"
        subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(certs)],
                       check=True, capture_output=True, timeout=60)
        files = pods.write(work / "reviews")
        bodies = {v: p.read_bytes() for v, p in files.items()}
        servers["webhook"] = Server("webhook", ["webhook.cli", "serve"], certs, args.webhook_server_cpu,
                                    work / "webhook.log").start()
        servers["bare"] = Server("bare", ["bench.bare_app"], certs, args.webhook_server_cpu,
                                 work / "bare.log").start()
        sizes = check_answers(servers, bodies)
        tls = servers["webhook"].tls_version()
        load_before = Path("/proc/loadavg").read_text().split()[0]

        def measure(cell: tuple, c: int, seconds: int) -> Run:
            name, variant, path = cell
            server = servers[name]
            others0 = sum(s.cpu_seconds(with_master=True) for s in servers.values())
            core0, cpu0, t0 = _core_times(args.webhook_server_cpu), server.cpu_seconds(), time.monotonic()
            result = run_wrk(wrk, args.webhook_client_cpu, server.url + path, files[variant], c, seconds)
            cpu, wall = server.cpu_seconds() - cpu0, time.monotonic() - t0
            core1 = _core_times(args.webhook_server_cpu)
            ours = sum(s.cpu_seconds(with_master=True) for s in servers.values()) - others0
            result.cpu_ms = 1000 * cpu / max(result.requests, 1)
            result.core_share = cpu / wall
            total = core1[0] - core0[0]
            result.others = max(0.0, (core1[1] - core0[1] - ours) / total) if total else 0.0
            return result

        print(f"bench: webhook: warm-up, {args.warmup:g} s per cell", flush=True)
        for cell in CELLS:
            measure(cell, max(concurrencies), args.warmup)

        results: dict[tuple, list[Run]] = {(cell, c): [] for cell in CELLS for c in concurrencies}
        steal0, started = _steal(), time.monotonic()
        for r in range(args.rounds):
            order = CELLS[r % len(CELLS):] + CELLS[:r % len(CELLS)]
            for c in concurrencies:
                for cell in order:
                    results[(cell, c)].append(measure(cell, c, args.duration))
                last = {cell: results[(cell, c)][-1] for cell in CELLS}
                ref = (last[BARE].rps + last[BARE_AGAIN].rps) / 2
                print(f"bench: webhook: round {r + 1}/{args.rounds} c={c}: bare {ref:,.0f} req/s "
                      f"(core share {last[BARE].core_share:.0%}, others {last[BARE].others:.0%}), bare again "
                      f"{last[BARE_AGAIN].rps / last[BARE].rps:.0%}, "
                      + ", ".join(f"{cell[1]} {cell[2]} {last[cell].rps / ref:.0%}"
                                  for cell in WEBHOOK_CELLS), flush=True)
        elapsed = time.monotonic() - started
        steal1 = _steal()
        memory = {name: s.memory() for name, s in servers.items()}
        slow_table, slow_goals = slow_clients(servers["webhook"])
        flood_table, flood_goals = flooding_peer(servers["webhook"])
        hog_table, hog_goals = slot_hogs(servers["webhook"])
    finally:
        for s in servers.values():
            s.stop()
        os.sched_setaffinity(0, own_affinity)
        shutil.rmtree(work, ignore_errors=True)

    def steal_pct(cpu: int) -> str:
        total = steal1[cpu][0] - steal0[cpu][0]
        return f"{100 * (steal1[cpu][1] - steal0[cpu][1]) / total:.1f}%" if total else "?"

    med = statistics.median
    rows, goals = [], []
    for c in concurrencies:
        bare, again = results[(BARE, c)], results[(BARE_AGAIN, c)]
        # Per round: a webhook cell against the mean of the round's two bare runs.
        ref_rps = [(a.rps + b.rps) / 2 for a, b in zip(bare, again)]
        ref_cpu = [(a.cpu_ms + b.cpu_ms) / 2 for a, b in zip(bare, again)]
        ref_p99 = [(a.p99_ms + b.p99_ms) / 2 for a, b in zip(bare, again)]
        for cell in CELLS:
            runs = results[(cell, c)]
            if cell == BARE:
                rps_q = cpu_q = p99_q = None
            elif cell == BARE_AGAIN:
                rps_q = [a.rps / b.rps for a, b in zip(runs, bare)]
                cpu_q = [b.cpu_ms / a.cpu_ms for a, b in zip(runs, bare) if a.cpu_ms]
                p99_q = [a.p99_ms / b.p99_ms for a, b in zip(runs, bare)]
            else:
                rps_q = [a.rps / ref for a, ref in zip(runs, ref_rps)]
                cpu_q = [ref / a.cpu_ms for a, ref in zip(runs, ref_cpu) if a.cpu_ms]
                p99_q = [a.p99_ms / ref for a, ref in zip(runs, ref_p99)]
                variant = cell[1]
                q, p = med(rps_q), med(p99_q)
                goals.append(Goal(f"{_label(cell)}, c={c}: req/s ≥ {RPS_GOAL[variant]:.0%} of bare",
                                  _pct(q), q >= RPS_GOAL[variant]))
                if c == concurrencies[0]:
                    goals.append(Goal(f"{_label(cell)}, c={c}: p99 ≤ {P99_GOAL:g}× bare's",
                                      _times(p), p <= P99_GOAL))
            rps = [x.rps for x in runs]
            rows.append([
                str(c), _label(cell), _spread(rps, _rps),
                _spread(rps_q, _pct) if rps_q else "",
                f"{med(x.cpu_ms for x in runs):.3f}",
                _spread(cpu_q, _pct) if cpu_q else "",
                f"{med(x.p50_ms for x in runs):.2f}", f"{med(x.p99_ms for x in runs):.1f}",
                _spread(p99_q, _times) if p99_q else "",
                str(sum(x.errors for x in runs))])
    shares = [x.core_share for runs in results.values() for x in runs]
    others = [x.others for runs in results.values() for x in runs]
    if args.webhook_raw:
        args.webhook_raw.write_text(json.dumps(
            [{"cell": list(cell), "c": c, "runs": [vars(x) for x in runs]}
             for (cell, c), runs in results.items()], indent=1))

    plural = "s" if args.rounds > 1 else ""
    table = Table(["c", "server, endpoint, pod", "req/s", "req/s vs bare", "worker CPU ms/req",
                   "req per CPU-s vs bare", "p50 ms", "p99 ms", "p99 vs bare", "errors"], rows,
                  f"Medians of {args.rounds} round{plural} × {args.duration:g} s per cell "
                  f"(in brackets: the middle half of the rounds)")
    mem_rows = [[name, f"{rss / 1024:.1f}", f"{hwm / 1024:.1f}"]
                for name in ("webhook", "bare") for _, rss, hwm in memory[name]]
    mem = Table(["server", "worker VmRSS MiB", "worker VmHWM MiB (peak)"], mem_rows,
                "Worker memory after the run (/proc/<worker pid>/status)")
    size = {v: len(b) for v, b in bodies.items()}
    conditions = [
        ("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
        ("commit", _git_commit()),
        ("machine", f"{len(cpus)} cores ({_cpu_model()}), Linux {platform.release()}; "
                    f"1-min load {load_before} before the run; steal during the run: "
                    f"server core {steal_pct(args.webhook_server_cpu)}, wrk core "
                    f"{steal_pct(args.webhook_client_cpu)}"),
        ("software", f"Python {platform.python_version()}, {_versions()}, "
                     f"{ssl.OPENSSL_VERSION}, wrk {wrk_version(wrk)}"),
        ("servers", f"{settings}, TLS through webhook.server.run's one-context hook (negotiated "
                    f"{tls}); the webhook as `mthreads-webhook serve` with the default config "
                    f"and no access log; the bare app (bench/bare_app.py) through the same "
                    f"`WebhookServer` settings; both up for the whole run"),
        ("pinning", f"both servers `taskset -c {args.webhook_server_cpu}`, wrk `taskset -c "
                    f"{args.webhook_client_cpu}` with 1 thread, this runner on core {args.webhook_client_cpu}; "
                    f"all on 127.0.0.1"),
        ("load", f"wrk, HTTPS with keep-alive, POST with Content-Type: application/json; bodies: "
                 f"a Deployment's pod in an AdmissionReview (bench/pods.py), Mthreads "
                 f"{size['mthreads']:,} B, plain {size['plain']:,} B; the bare app gets the "
                 f"Mthreads body; answers {sizes[BARE]} B (bare), {sizes[WEBHOOK_CELLS[0]]} B "
                 f"(with the patch), {sizes[WEBHOOK_CELLS[1]]} B (allowed, no patch)"),
        ("schedule", f"{args.warmup:g} s warm-up per cell, then {args.rounds} round{plural}; each "
                     f"round runs every cell once per concurrency ({args.duration:g} s each), "
                     f"A B B A B B in an order rotated from round to round; a webhook cell's "
                     f"ratio is taken against the mean of its round's two bare runs; "
                     f"{elapsed / 60:.1f} min measured"),
        ("core share", f"the measured worker was on the CPU {med(shares):.0%} of each run's wall "
                       f"time (median; min {min(shares):.0%}); other work (interrupts, the kernel's "
                       f"loopback work, other tenants' processes) kept the server core busy "
                       f"{med(others):.0%} of the time (median; max {max(others):.0%})"),
    ]
    return Section(
        part="webhook", title=TITLE,
        intro="The project's webhook and a bare Flask app that only parses the review and allows "
              "it, under the same gunicorn settings, on the same core, measured alternately in "
              "one run. `req/s vs bare` is the share of the stack's ceiling that the webhook "
              "keeps; `req per CPU-s vs bare` is the same from the worker's CPU time per "
              "request, which a busy neighbour moves less than the wall clock.",
        conditions=conditions, tables=[table, mem, slow_table, flood_table, hog_table],
        goals=goals + slow_goals + flood_goals + hog_goals)


def slow_clients(server: Server, calls: int = SLOW_CALLS) -> tuple[Table, list[Goal]]:
    """Real calls while connections dribble their request heads a byte every 0.5 s and
    reconnect when cut off (tests/hardening/net.py), against the running webhook."""
    from tests.hardening.net import real_calls_under_dribbling

    rows, goals = [], []
    for count, peers in SLOW_LOADS:
        print(f"bench: webhook: {count} dribbling clients", flush=True)
        r = real_calls_under_dribbling(_target(server), count, peers, calls=calls)
        seconds = [t for _, t in r["calls"]]
        answered = sum(1 for status, _ in r["calls"] if status == 200)
        rows.append([str(count), str(peers), f"{answered} of {len(seconds)}",
                     f"{statistics.median(seconds):.3f}", f"{max(seconds):.3f}",
                     str(r["reconnects"])])
        goals.append(Goal(f"{count} dribbling clients: every real call answered within "
                          f"{SLOW_CALL_GOAL:g} s, TLS handshake included",
                          f"{answered} of {len(seconds)}, slowest {max(seconds):.2f} s",
                          answered == len(seconds) and max(seconds) < SLOW_CALL_GOAL))
    table = Table(["dribbling clients", "from peers", "real calls answered", "median s",
                   "slowest s", "clients cut off and reconnected"], rows,
                  f"Slow clients: {calls} real POSTs /validate, each on a new connection, while "
                  f"the clients send their request heads a byte every 0.5 s and reconnect when "
                  f"cut off (after the 3 s read budget)")
    return table, goals


def flooding_peer(server: Server, calls: int = FLOOD_CALLS) -> tuple[Table, list[Goal]]:
    """Calls from 127.0.0.1 while connections from 127.0.0.2 send big reviews back to back
    (tests/hardening/flood.py), against the running webhook."""
    from tests.hardening.flood import calls_under_flood

    rows, goals = [], []
    for connections in FLOOD_LOADS:
        print(f"bench: webhook: {connections} connections flooding big reviews", flush=True)
        r = calls_under_flood(_target(server), connections, calls=calls)
        seconds = [t for _, t in r["calls"]]
        answered = sum(1 for status, _ in r["calls"] if status == 200)
        flood = r["flood"]
        reviews = flood["answers"].get("200", 0)
        others = sum(n for status, n in flood["answers"].items() if status != "200")
        rows.append([str(connections), f"{answered} of {len(seconds)}",
                     f"{statistics.median(seconds):.3f}",
                     f"{statistics.quantiles(seconds, n=100, method='inclusive')[98]:.3f}",
                     f"{max(seconds):.3f}",
                     f"{reviews} in {flood['seconds']:.0f} s ({reviews / flood['seconds']:.1f}/s)"
                     + (f", {others} other answers" if others else "")])
        goals.append(Goal(f"{connections} connections of one peer flooding big reviews: every "
                          f"call of another peer answered within {FLOOD_CALL_GOAL:g} s, TLS "
                          f"handshake included",
                          f"{answered} of {len(seconds)}, slowest {max(seconds):.2f} s",
                          answered == len(seconds) and max(seconds) < FLOOD_CALL_GOAL))
    size = flood.get("bytes", 0)
    table = Table(["flooding connections (one peer)", "calls answered", "median s", "p99 s",
                   "slowest s", "flood's reviews answered meanwhile"], rows,
                  f"One peer flooding: {calls} POSTs /validate of a small review from 127.0.0.1, "
                  f"each on a new connection, while connections from 127.0.0.2 send "
                  f"{size / 1e6:.1f} MB reviews (20,000 slice containers) back to back")
    return table, goals


def slot_hogs(server: Server, calls: int = HOG_CALLS) -> tuple[Table, list[Goal]]:
    """Calls from 127.0.0.1 while other loopback addresses ask for every connection slot
    (tests/hardening/slot_hogs.py), against the running webhook."""
    from tests.hardening.slot_hogs import calls_under_slot_hogs
    from webhook.server.slow_clients import MAX_CONNECTIONS

    rows, goals = [], []
    for peers in HOG_LOADS:
        print(f"bench: webhook: {peers} peers holding the connection slots", flush=True)
        r = calls_under_slot_hogs(_target(server), peers, MAX_CONNECTIONS // peers, calls=calls)
        seconds = [t for _, t in r["calls"]]
        answered = sum(1 for status, _ in r["calls"] if status == 200)
        hogs = r["hogs"]
        rows.append([str(peers), str(MAX_CONNECTIONS // peers),
                     f"{hogs.get('held_min')}–{hogs.get('held_max')}",
                     f"{answered} of {len(seconds)}", f"{statistics.median(seconds):.3f}",
                     f"{statistics.quantiles(seconds, n=100, method='inclusive')[98]:.3f}",
                     f"{max(seconds):.3f}", str(hogs.get("reopened"))])
        goals.append(Goal(f"{peers} peers holding the connection slots: every call of another "
                          f"peer answered within {HOG_CALL_GOAL:g} s, TLS handshake included",
                          f"{answered} of {len(seconds)}, slowest {max(seconds):.2f} s",
                          answered == len(seconds) and max(seconds) < HOG_CALL_GOAL))
    table = Table(["hogging peers", "connections asked each", "held", "calls answered",
                   "median s", "p99 s", "slowest s", "hogs' connections cut and reopened"],
                  rows,
                  f"Peers holding the slots: {calls} POSTs /validate from 127.0.0.1, each on a "
                  f"new connection, while other addresses ask for all {MAX_CONNECTIONS:,} slots "
                  f"(kept alive after one review, 8 each silent), opening again whatever is cut")
    return table, goals


def _target(server: Server):
    class Target:  # what the test clients need of a server
        port, url, ca = server.port, server.url, str(server.ca)
    return Target


def main() -> None:
    """The slow-client, flood and slot figures alone (`python -m bench.webhook`), against a fresh
    webhook."""
    work = Path(tempfile.mkdtemp(prefix="bench-slow-"))
    try:
        subprocess.run([sys.executable, "-m", "webhook.cli", "certs", "--out", str(work / "certs")],
                       check=True, capture_output=True, timeout=60)
        server = Server("webhook", ["webhook.cli", "serve"], work / "certs", None,
                        work / "webhook.log").start()
        try:
            table, goals = slow_clients(server)
            flood_table, flood_goals = flooding_peer(server)
            hog_table, hog_goals = slot_hogs(server)
        finally:
            server.stop()
        print(table.markdown())
        print(flood_table.markdown())
        print(hog_table.markdown())
        for g in goals + flood_goals + hog_goals:
            print(f"{'met' if g.met else 'NOT MET'}: {g.what}: {g.measured}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
