"""Part `allocator`: the pure decision layer (webhook/allocator/decide.py), no API server.

For each fleet size (default 1,000, 5,000 and 20,000 nodes of 8 cards, S4000 and S5000
alternating; bench/workload.py), the state holds the nodes and then fills up with the bench's
pods (20,000 by default: mixed slice sizes, with and without cores, and about 4% whole-card pods).
The cost of a decision is sampled at three points of the fill — near the start, the middle and
the end — by timing what the decision loop does for a pending pod: `read_request`, `decide`, and
for a placement `state.add(share)` (as the loop's assume step). Each sample runs for `--duration`
seconds or `--alloc-samples` decisions, whichever comes first, and every placement it makes stays
in the state.

Between the samples the state is filled by a simple first-fit filler in this module (nodes in
name order, a card of the node with room, least used first), not by `decide`: placing 20,000 pods
with `decide` itself would take hours at 20,000 nodes. The filler writes the same kind of shares
(memory and cores per card, whole cards) through `ClusterState.add`, so the state a sampled
decision reads has as many pods, shares and busy cards as it would after that many decisions.

Memory: tracemalloc's traced size of a state with the nodes, then with all the pods placed
(built separately, so tracing does not slow the timed decisions).
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

from webhook.allocator.decide import Placement, decide
from webhook.allocator.resources import pod_requests
from webhook.allocator.shares import CardShare, PodShare
from webhook.allocator.state import ClusterState
from webhook.cards import CORES_PER_CARD, UNIT_MIB, Fleet
from webhook.config import Config, MthreadsConfig
from webhook.pods import is_mthreads_pod, read_request, resource_names

from . import workload
from .report import Goal, Section, Table

TITLE = "Allocator decisions (pure layer)"
RATE_GOAL = 2000.0  # decisions/s at GOAL_NODES nodes
GOAL_NODES = 5000
POINTS = (0.05, 0.50, 0.95)  # where in the fill the decisions are sampled
PROFILE_DECISIONS = 5
SAMPLE_SECONDS = 10.0  # default of --duration: seconds per sample


def add_arguments(g) -> None:
    g.add_argument("--alloc-nodes", default="1000,5000,20000",
                   help="fleet sizes, comma-separated (%(default)s)")
    g.add_argument("--alloc-pods", type=int, default=20000, help="pods placed (%(default)s)")
    g.add_argument("--alloc-samples", type=int, default=2000,
                   help="at most this many decisions per sample (%(default)s)")


def _seconds(args) -> float:
    return args.duration if args.duration is not None else SAMPLE_SECONDS


def _sizes(args) -> list[int]:
    return [int(s) for s in str(args.alloc_nodes).split(",") if s.strip()]


def estimate(args) -> float:
    sizes = _sizes(args)
    return sum(len(POINTS) * (_seconds(args) + 1) + n / 1000 * 1.5 + 5 for n in sizes) + 20


# --- the state and its filler ------------------------------------------------------------

MT = MthreadsConfig(memory_per_card=workload.MEMORY_PER_CARD)
CONFIG = Config(mthreads=MT)
FLEET = Fleet.of(MT.memory_per_card)
NAMES = resource_names(MT)


def make_state(nodes: int) -> ClusterState:
    state = ClusterState(MT)
    for i in range(nodes):
        state.set_node(workload.node(i))
    return state


def make_pods(count: int) -> list[dict]:
    return [workload.pod(s, f"p{i:05d}", uid=str(uuid.UUID(int=10**9 + i)))
            for i, s in enumerate(workload.shapes(count))]


class Filler:
    """A stand-in for `decide` (binpack-like, no scan of the fleet) to bring the state to N pods:
    the pod goes to one of the few nodes being filled, else to the first untouched node."""

    WINDOW = 8

    def __init__(self, state: ClusterState):
        self.state = state
        self.order = sorted(state.nodes)
        self.cursor = 0  # nodes before it take nothing more of what comes
        self.misses = 0
        self.fresh = {u: 0 for u in workload.MODELS}  # first node of a model that may be untouched

    def place(self, pod: dict) -> bool:
        wants = pod_requests(pod)
        limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
        count = int(limits["mthreads.com/vgpu"])
        memory = int(limits["mthreads.com/sgpu-memory"])
        cores = limits.get("mthreads.com/sgpu-core")
        whole = cores is not None and int(cores) == CORES_PER_CARD * count
        cores = int(cores) if cores is not None else None
        for step in range(self.WINDOW):
            at = self.cursor + step
            if at >= len(self.order):
                break
            share = self._fit(self.state.nodes[self.order[at]], pod, wants, count, memory, cores,
                              whole)
            if share is not None:
                self.state.add(share)
                if step == 0:
                    self.misses = 0
                return True
            if step == 0:
                self.misses += 1
                if self.misses >= 8:
                    self.cursor, self.misses = self.cursor + 1, 0
        # the first untouched node (of the model a whole-card pod asks for)
        models = [memory // count] if whole else list(self.fresh)
        for units in models:
            i = self.fresh[units]
            while i < len(self.order):
                info = self.state.nodes[self.order[i]]
                if info.cards.cards[0].model.units == units and self._untouched(info):
                    share = self._fit(info, pod, wants, count, memory, cores, whole)
                    if share is not None:
                        self.fresh[units] = i
                        self.state.add(share)
                        return True
                i += 1
            self.fresh[units] = i
        return False

    def _untouched(self, info) -> bool:
        return all(self.state.card(c.id).idle for c in info.cards.cards)

    def _fit(self, info, pod, wants, count, memory, cores, whole) -> PodShare | None:
        st = self.state
        free = info.allocatable - st.requested_on(info.name)
        if wants.pods > free.pods or wants.cpu_milli > free.cpu_milli or \
                wants.memory_bytes > free.memory_bytes or st.node_held_whole(info.name):
            return None
        uid = pod["metadata"]["uid"]
        cards = info.cards.cards
        if whole:
            units = memory // count
            idle = [c for c in cards if c.model.units == units and st.card(c.id).idle]
            if len(idle) < count:
                return None
            return PodShare(uid, info.name, wants, tuple(
                CardShare(c.id, c.memory_mib, CORES_PER_CARD) for c in idle[:count]))
        best, best_used = None, None
        for c in cards:
            u = st.card(c.id)
            if u.whole or (u.memory_mib >= c.memory_mib and u.cores >= CORES_PER_CARD):
                continue
            if c.memory_mib - u.memory_mib < memory * UNIT_MIB:
                continue
            if (cores is None and u.cores >= CORES_PER_CARD) or \
                    (cores is not None and CORES_PER_CARD - u.cores < cores):
                continue
            used = u.memory_mib / c.memory_mib + u.cores / CORES_PER_CARD
            if best is None or used < best_used:
                best, best_used = c, used
        if best is None:
            return None
        return PodShare(uid, info.name, wants,
                        (CardShare(best.id, memory * UNIT_MIB, cores or 0),))


# --- one decision, as the loop makes it -------------------------------------------------

def decide_one(pod: dict, state: ClusterState) -> bool:
    request = read_request(pod, MT, FLEET) if is_mthreads_pod(pod, NAMES) else None
    result = decide(pod, request, state, CONFIG)
    if isinstance(result, Placement):
        state.add(result.share)
        return True
    return False


def sample(pods: list[dict], start: int, state: ClusterState, seconds: float, cap: int):
    """Decide pods[start:] one by one for `seconds` (at least 3, at most `cap`)."""
    gc.collect()
    done = placed = 0
    t0 = time.perf_counter()
    elapsed = 0.0
    while start + done < len(pods) and done < cap and (done < 3 or elapsed < seconds):
        placed += decide_one(pods[start + done], state)
        done += 1
        elapsed = time.perf_counter() - t0
    return done, placed, elapsed


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
    filler = Filler(state)
    placed = sum(filler.place(p) for p in pods)
    after_pods = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del state, filler
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
        filler = Filler(state)
        at, skipped = 0, 0
        rates[n] = []
        for point in POINTS:
            target = int(total * point)
            while at < target:
                skipped += not filler.place(pods[at])
                at += 1
            done, placed, elapsed = sample(pods, at, state, _seconds(args), args.alloc_samples)
            rate = done / elapsed
            rates[n].append(rate)
            rows.append([f"{n:,}", f"{at:,}", f"{done:,}", f"{placed:,}",
                         f"{1000 * elapsed / done:.1f}", f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"])
            print(f"bench: allocator: {n} nodes, {at} placed: {done} decisions, {rate:.1f}/s",
                  flush=True)
            at += done
        if n == GOAL_NODES and rates[n][0] < RATE_GOAL:
            profile_rows = profile(pods, at, state, PROFILE_DECISIONS)
        del state, filler
        gc.collect()
        nodes_mib, pods_mib, placed = memory_of(n, pods)
        mem_rows.append([f"{n:,}", f"{build:.1f}", f"{nodes_mib:.1f}",
                         f"{1024 * nodes_mib / n:.1f}", f"{placed:,}", f"{pods_mib:.1f}",
                         f"{2**20 * pods_mib / max(placed, 1):,.0f}"])
    if GOAL_NODES in rates:
        first = rates[GOAL_NODES][0]
        goals.append(Goal(f"decisions/s at {GOAL_NODES:,} nodes, start of the fill, ≥ {RATE_GOAL:,.0f}",
                          f"{first:,.1f}/s", first >= RATE_GOAL))
    for n, r in rates.items():
        growth = r[0] / r[-1]  # cost at the end / cost at the start
        linear = POINTS[-1] / POINTS[0]
        goals.append(Goal(f"{n:,} nodes: cost per decision at {POINTS[-1]:.0%} of the pods placed / "
                          f"at {POINTS[0]:.0%} < {linear:.0f}× (less than linear in placed pods)",
                          f"{growth:.2f}×", growth < linear))
    tables = [
        Table(["nodes", "pods placed when sampled", "decisions", "placed by them",
               "ms / decision", "decisions/s"], rows, "Decision rate by fleet size and fill"),
        Table(["nodes", "build s", "state MiB (nodes)", "KiB / node", "pods placed",
               "MiB for the pods", "bytes / pod"], mem_rows,
              "Memory of the state (tracemalloc)"),
    ]
    if profile_rows:
        tables.append(Table(["function", "where", "calls", "own time", "with callees"],
                            profile_rows,
                            f"cProfile, {PROFILE_DECISIONS} decisions at {GOAL_NODES:,} nodes "
                            f"(sorted by own time)"))
        notes.append(
            "Every decision visits every node and each of its 8 cards (`decide` loops over "
            "`state.nodes`; `fit_cards` runs its filter pipeline of lambdas over the cards and "
            "calls `state.card` per card and filter; `best_node` then recomputes `node_used` "
            "over the cards of every fitting node), so the cost is linear in the number of nodes "
            "and flat in the number of pods placed: it is the fleet size, not the fill, that "
            "misses the rate goal.")
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
            ("sample", f"{_seconds(args):g} s or {args.alloc_samples:,} decisions at "
             + ", ".join(f"{p:.0%}" for p in POINTS) + " of the fill; one pass"),
            ("Python", f"{platform.python_implementation()} {platform.python_version()}, "
             f"one thread"),
        ],
        tables=tables, goals=goals, notes=notes)
