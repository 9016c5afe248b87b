"""Part `allocator`: the pure decision layer (webhook/scheduling/decide.py), no API server.

For each fleet size (default 1,000, 5,000 and 20,000 nodes of 8 cards, S4000 and S5000
alternating; bench/workload.py), the state holds the nodes and then the bench's pods (20,000 by
default: mixed slice sizes, with and without cores, and about 4% whole-card pods) are placed one
by one, as the decision loop places a pending pod: `request_of`, `decide`, and for a placement
`state.add(share)` (the loop's assume step). Every decision is timed; the table gives the rate
over the whole fill and in three windows of it (its first, middle and last 5%), so that a cost
that grows with the pods already placed shows.

Memory: tracemalloc's traced size of a state with the nodes, then with all the pods placed
(a separate fill, so tracing does not slow the timed decisions).
"""

from __future__ import annotations

import cProfile
import gc
import io
import platform
import pstats
import time
import tracemalloc
import uuid

from webhook.model.cards import Fleet
from webhook.model.config import Config, MthreadsConfig
from webhook.scheduling.decide import Placement, place
from webhook.scheduling.request import request_of
from webhook.scheduling.state import ClusterState

from . import workload
from .report import Goal, Section, Table

TITLE = "Allocator decisions (pure layer)"
RATE_GOAL = 2000.0  # decisions/s at GOAL_NODES nodes
GOAL_NODES = 5000
WINDOW = 0.05  # share of the fill in each reported window
WINDOWS = (("first 5%", 0.0), ("middle 5%", 0.475), ("last 5%", 0.95))  # name, start
PROFILE_DECISIONS = 200


def add_arguments(g) -> None:
    g.add_argument("--alloc-nodes", default="1000,5000,20000",
                   help="fleet sizes, comma-separated (%(default)s)")
    g.add_argument("--alloc-pods", type=int, default=20000, help="pods placed (%(default)s)")


def _sizes(args) -> list[int]:
    return [int(s) for s in str(args.alloc_nodes).split(",") if s.strip()]


def estimate(args) -> float:
    # the state's build, then two fills (timed, traced) of about 0.3 ms and 1 ms a pod
    return sum(n / 1000 * 7 + args.alloc_pods * 0.0013 + 5 for n in _sizes(args)) + 10


# --- the state and the pods ----------------------------------------------------------------

MT = MthreadsConfig(memory_per_card=workload.MEMORY_PER_CARD)
CONFIG = Config(mthreads=MT)
FLEET = Fleet.of(MT.memory_per_card)


def make_state(nodes: int) -> ClusterState:
    state = ClusterState(MT)
    for i in range(nodes):
        state.set_node(workload.node(i))
    return state


def make_pods(count: int) -> list[dict]:
    return [workload.pod(s, f"p{i:05d}", uid=str(uuid.UUID(int=10**9 + i)))
            for i, s in enumerate(workload.shapes(count))]


# --- one decision, as the loop makes it -------------------------------------------------

def decide_one(pod: dict, state: ClusterState) -> bool:
    ask = request_of(pod, CONFIG, FLEET)
    result = place(pod, ask, state, CONFIG)
    if isinstance(result, Placement):
        state.add(result.share)
        return True
    return False


def fill(pods: list[dict], state: ClusterState) -> tuple[list[float], int]:
    """Decide every pod in turn; the seconds of each decision, and how many were placed."""
    gc.collect()
    times, placed = [], 0
    clock = time.perf_counter
    for pod in pods:
        t0 = clock()
        placed += decide_one(pod, state)
        times.append(clock() - t0)
    return times, placed


def profile(pods: list[dict], start: int, state: ClusterState, decisions: int) -> list[list[str]]:
    prof = cProfile.Profile()
    prof.enable()
    for i in range(decisions):
        decide_one(pods[start + i], state)
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt or 1e-9
    rows = []
    entries = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # by tottime
    for (file, line, func), (cc, nc, tt, ct, _) in entries[:12]:
        where = f"{file.rsplit('/', 1)[-1]}:{line}" if file != "~" else "builtin"
        rows.append([f"`{func}`", where, f"{nc:,}", f"{100 * tt / total:.0f}%",
                     f"{100 * ct / total:.0f}%"])
    return rows


def memory_of(nodes: int, pods: list[dict]) -> tuple[float, float, int]:
    gc.collect()
    tracemalloc.start()
    state = make_state(nodes)
    after_nodes = tracemalloc.get_traced_memory()[0]
    placed = sum(decide_one(p, state) for p in pods)
    after_pods = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del state
    gc.collect()
    return after_nodes / 2**20, (after_pods - after_nodes) / 2**20, placed


# --- the part ----------------------------------------------------------------------------

def run(args) -> Section:
    sizes = _sizes(args)
    total = args.alloc_pods
    pods = make_pods(total)
    rows, mem_rows, goals, notes = [], [], [], []
    rates: dict[int, list[float]] = {}
    profile_rows: list[list[str]] = []
    for n in sizes:
        t0 = time.perf_counter()
        state = make_state(n)
        build = time.perf_counter() - t0
        times, placed = fill(pods, state)
        width = max(1, int(total * WINDOW))
        rates[n] = []
        for name, start in WINDOWS:
            at = int(total * start)
            part = times[at:at + width]
            rate = len(part) / sum(part)
            rates[n].append(rate)
            rows.append([f"{n:,}", f"{name} ({at:,}–{at + len(part):,})", f"{1000 * sum(part) / len(part):.2f}",
                         f"{rate:,.0f}"])
        whole = len(times) / sum(times)
        rows.append([f"{n:,}", f"all {len(times):,} ({placed:,} placed)",
                     f"{1000 * sum(times) / len(times):.2f}", f"{whole:,.0f}"])
        print(f"bench: allocator: {n} nodes: {len(times)} decisions, {whole:.0f}/s, "
              f"windows {', '.join(f'{r:.0f}' for r in rates[n])}/s", flush=True)
        rates[n].append(whole)
        if n == GOAL_NODES:  # where the time goes, late in the fill (state as it is at the end)
            for pod in pods[-PROFILE_DECISIONS:]:
                state.remove(pod["metadata"]["uid"])
            profile_rows = profile(pods, total - PROFILE_DECISIONS, state, PROFILE_DECISIONS)
        del state
        gc.collect()
        nodes_mib, pods_mib, placed = memory_of(n, pods)
        mem_rows.append([f"{n:,}", f"{build:.1f}", f"{nodes_mib:.1f}",
                         f"{1024 * nodes_mib / n:.1f}", f"{placed:,}", f"{pods_mib:.1f}",
                         f"{2**20 * pods_mib / max(placed, 1):,.0f}"])
    if GOAL_NODES in rates:
        slowest = min(rates[GOAL_NODES])
        goals.append(Goal(f"decisions/s at {GOAL_NODES:,} nodes, over the fill and in each "
                          f"window, ≥ {RATE_GOAL:,.0f}", f"{slowest:,.0f}/s (the slowest)",
                          slowest >= RATE_GOAL))
    first_at, last_at = WINDOWS[0][1] + WINDOW / 2, WINDOWS[-1][1] + WINDOW / 2
    linear = last_at / first_at
    for n, r in rates.items():
        growth = r[0] / r[2]  # cost in the last window / cost in the first
        goals.append(Goal(f"{n:,} nodes: cost per decision in the last 5% of the fill / in the "
                          f"first 5% < {linear:.0f}× (less than linear in placed pods)",
                          f"{growth:.2f}×", growth < linear))
    tables = [
        Table(["nodes", "decisions (pods placed before them)", "ms / decision", "decisions/s"],
              rows, "Decision rate by fleet size and fill"),
        Table(["nodes", "build s", "state MiB (nodes)", "KiB / node", "pods placed",
               "MiB for the pods", "bytes / pod"], mem_rows,
              "Memory of the state (tracemalloc)"),
    ]
    if profile_rows:
        tables.append(Table(["function", "where", "calls", "own time", "with callees"],
                            profile_rows,
                            f"cProfile, the last {PROFILE_DECISIONS} decisions of the fill "
                            f"again at {GOAL_NODES:,} nodes (sorted by own time)"))
    return Section(
        part="allocator", title=TITLE,
        intro=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        conditions=[
            ("fleets", ", ".join(f"{n:,}" for n in sizes) + f" nodes × {workload.CARDS} cards, "
             "S4000 (96 units) and S5000 (160) alternating; 64 cpu, 512Gi, 110 pods a node"),
            ("pods", f"{total:,}: slices of {sorted(set(workload.SLICE_MEMORY))} units, cores "
             f"none/1/2/4, {workload.WHOLE_SHARE:.0%} whole-card pods (1 or 2 cards); "
             "cpu 100m–500m, memory 256Mi–1Gi"),
            ("policies", f"node {CONFIG.allocator.node_policy}, card {CONFIG.allocator.gpu_policy} "
             "(the defaults)"),
            ("timing", "every decision, one fill per fleet size; windows of "
             f"{WINDOW:.0%} of the pods at the start, middle and end"),
            ("Python", f"{platform.python_implementation()} {platform.python_version()}, "
             f"one thread"),
        ],
        tables=tables, goals=goals, notes=notes)
