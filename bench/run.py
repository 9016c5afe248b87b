"""`make bench`: run the benchmark parts and rewrite their sections of docs/benchmarks.md.

    python -m bench.run                     # every part there is
    python -m bench.run --parts webhook     # one part (make bench BENCH=webhook)
    python -m bench.run --quick             # a smoke run: one short round, doc untouched

A part is a module `bench/<name>.py` with

    TITLE: str
    def add_arguments(parser): ...          # optional, its own options
    def estimate(args) -> float: ...        # optional, seconds, printed before it starts
    def run(args) -> bench.report.Section   # the measurement; rows for the doc

The common options (--rounds, --duration, --warmup) are None unless given: a
part fills in its own defaults.

Add a part by writing the module and naming it in PARTS.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import sys
import time
from pathlib import Path

from .report import update_doc

# In the order they run and appear in the doc.
PARTS = ("webhook", "instructions", "allocator", "hostile", "memory", "extender", "e2e", "backoff")
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


def _available() -> dict[str, object]:
    found = {}
    for name in PARTS:
        try:
            found[name] = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"bench.{name}":
                raise
    return found


def _parser(modules: dict[str, object]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=os.environ.get("BENCH") or "",
                   help=f"comma-separated, of {', '.join(PARTS)} (default: all available; "
                        f"env BENCH)")
    p.add_argument("--rounds", type=int, help="rounds of alternating measurements (each part has "
                                               "its default)")
    p.add_argument("--duration", type=float, help="seconds per measurement (part's default)")
    p.add_argument("--warmup", type=float, help="seconds of warm-up per cell (part's default)")
    p.add_argument("--quick", action="store_true",
                   help="one round of 2 s, 1 s warm-up, doc untouched: checks that the bench works")
    p.add_argument("--doc", type=Path, default=DOC, help="the doc to update (docs/benchmarks.md)")
    p.add_argument("--no-write", action="store_true", help="print the sections, leave the doc")
    for name, module in modules.items():
        add = getattr(module, "add_arguments", None)
        if add:
            add(p.add_argument_group(f"part {name}"))
    return p


def main(argv: list[str] | None = None) -> int:
    modules = _available()
    args = _parser(modules).parse_args(argv)
    if args.quick:
        args.rounds, args.duration, args.warmup = 1, 2.0, 1.0
    wanted = [n.strip() for n in args.parts.split(",") if n.strip()] or list(modules)
    unknown = [n for n in wanted if n not in PARTS]
    missing = [n for n in wanted if n in PARTS and n not in modules]
    if unknown or missing:
        print(f"bench: unknown part(s) {', '.join(unknown + missing)}; available: "
              f"{', '.join(modules)}", file=sys.stderr)
        return 2
    shared = args
    for name in wanted:
        module = modules[name]
        # Each part fills in its own defaults (rounds, durations): give it a copy, so one
        # part's 13 rounds do not become the next part's.
        args = copy.copy(shared)
        estimate = getattr(module, "estimate", None)
        eta = f", about {estimate(args) / 60:.0f} min" if estimate else ""
        print(f"bench: {name}: {module.TITLE}{eta}", flush=True)
        started = time.monotonic()
        section = module.run(args)
        print(f"bench: {name}: done in {time.monotonic() - started:.0f} s", flush=True)
        if args.no_write or args.quick:
            print(section.markdown())
        else:
            update_doc(args.doc, section)
            print(section.markdown())
            print(f"bench: {name}: wrote its section of {args.doc.name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
