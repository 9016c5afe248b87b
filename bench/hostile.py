"""Part `hostile`: the allocator's decision rate for ordinary pods, with and without pods whose
decision is costly pending beside them (issue 46, finding 4), side by side in one run.

The allocator's loop as it decides, with no API server: a SchedulerCache holding the nodes, the
pending queue with its default backoff, and for each due pod `request_of`, the cycle state made
before the lock, `place` under it, and for a placement `assume` (then `forget`, so the cluster
stays as empty as it started and every decision frees room, which makes every pod that did not
fit due again once its backoff is over: the hostile pods' worst case). Ordinary pods are bench/
workload.py's; a hostile pod is issue 46's: 200 `NotIn` lists of 1,000 hostnames on
`kubernetes.io/hostname` and `mthreads.ai/use-gpuuuid: nowhere-mthreads-0` (no node fits, so
each of its decisions reads every node). The cells alternate, each one fresh state.
"""

from __future__ import annotations

import gc
import platform
import time

from webhook.model import annotations as keys
from webhook.scheduling.cache import SchedulerCache
from webhook.scheduling.cycle_state import cycle_of
from webhook.scheduling.decide import Placement, place
from webhook.scheduling.pod_status import uid_of
from webhook.scheduling.queue import POD_INITIAL_BACKOFF, POD_MAX_BACKOFF, PendingQueue
from webhook.scheduling.request import request_of

from . import workload
from .allocator import CONFIG, FLEET, MT, make_pods
from .report import Goal, Section, Table

TITLE = "Decisions beside costly pods"
HOSTILE = 10
RATE_SHARE_GOAL = 0.90  # of the rate without them
LISTS, VALUES = 200, 1000


def add_arguments(g) -> None:
    g.add_argument("--hostile-nodes", default="300,2000", help="fleet sizes (%(default)s)")


def _sizes(args) -> list[int]:
    return [int(s) for s in str(args.hostile_nodes).split(",") if s.strip()]


def _timing(args) -> tuple[int, float]:
    return args.rounds or 2, args.duration or 15.0


def estimate(args) -> float:
    rounds, duration = _timing(args)
    return len(_sizes(args)) * rounds * 2 * (duration + 3)


def hostile_pod(i: int) -> dict:
    pod = workload.pod(workload.shapes(1)[0], f"hostile-{i}", uid=f"hostile-{i:04d}")
    pod["metadata"]["annotations"] = {keys.USE_CARDS: "nowhere-mthreads-0"}
    exprs = [{"key": "kubernetes.io/hostname", "operator": "NotIn",
              "values": [f"h{j}-{k}" for k in range(VALUES)]} for j in range(LISTS)]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": exprs}]}}}
    return pod


def cell(nodes: int, ordinary: list[dict], hostile: int, duration: float) -> tuple[float, int]:
    """(ordinary decisions a second, hostile decisions made) over `duration` seconds."""
    cache = SchedulerCache(MT)
    cache.apply("node", "RESET", [workload.node(i) for i in range(nodes)])
    cache.apply("pod", "RESET", [])
    queue = PendingQueue(workload.SCHEDULER, (POD_INITIAL_BACKOFF, POD_MAX_BACKOFF))
    for i in range(hostile):
        queue.upsert(hostile_pod(i))
    gc.collect()
    done = tried = 0
    at = iter(range(10**9))
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        if len(queue) < hostile + 20:  # ordinary pods keep arriving
            for _ in range(20):
                pod = ordinary[next(at) % len(ordinary)]
                queue.upsert(dict(pod, metadata=dict(pod["metadata"], uid=f"o-{next(at)}")))
        for pod in queue.due(cache.generation):
            ask = request_of(pod, CONFIG, FLEET)
            cycle = cycle_of(pod, ask, CONFIG)
            result = cache.read(lambda state: place(pod, ask, state, CONFIG, cycle))
            uid = uid_of(pod)
            if isinstance(result, Placement):
                queue.remove(uid)
                cache.assume(result.share, "bench", uid)
                cache.forget(result.share)
                cache.apply("pod", "DELETED", pod)  # gone: what its decision kept goes
                done += 1
            else:
                queue.unschedulable(uid, cache.generation)
                tried += 1
            if time.perf_counter() - start >= duration:
                break
    return done / (time.perf_counter() - start), tried


def run(args) -> Section:
    rounds, duration = _timing(args)
    ordinary = make_pods(200)
    rows, goals = [], []
    for n in _sizes(args):
        rates: dict[int, list[float]] = {0: [], HOSTILE: []}
        tries: list[int] = []
        for _ in range(rounds):
            for hostile in (0, HOSTILE):
                rate, tried = cell(n, ordinary, hostile, duration)
                rates[hostile].append(rate)
                if hostile:
                    tries.append(tried)
                print(f"bench: hostile: {n} nodes, {hostile} hostile: {rate:,.0f}/s "
                      f"({tried} hostile decisions)", flush=True)
        without, beside = (sorted(rates[h])[len(rates[h]) // 2] for h in (0, HOSTILE))
        share = beside / without
        rows.append([f"{n:,}", f"{without:,.0f}", f"{beside:,.0f}", f"{share:.0%}",
                     f"{sum(tries) / len(tries):.0f}"])
        goals.append(Goal(f"{n:,} nodes: ordinary decisions/s beside {HOSTILE} hostile pods "
                          f"≥ {RATE_SHARE_GOAL:.0%} of the rate without them", f"{share:.0%}",
                          share >= RATE_SHARE_GOAL))
    return Section(
        part="hostile", title=TITLE,
        intro=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        conditions=[
            ("fleets", ", ".join(f"{n:,}" for n in _sizes(args)) + " nodes of bench/workload.py"),
            ("timing", f"{rounds} rounds of {duration:.0f} s a cell, without and with "
                       f"{HOSTILE} hostile pods alternating; the median of the rounds"),
            ("backoff", f"the queue's default, {POD_INITIAL_BACKOFF:.0f} s doubling to "
                        f"{POD_MAX_BACKOFF:.0f} s"),
            ("Python", f"{platform.python_implementation()} {platform.python_version()}, "
                       "one thread"),
        ],
        tables=[Table(["nodes", "ordinary decisions/s, alone", f"beside {HOSTILE} hostile",
                       "share", "hostile decisions a cell"], rows,
                      "Ordinary decisions a second, with and without hostile pods pending")],
        goals=goals)
