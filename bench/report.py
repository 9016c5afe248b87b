"""What a bench part returns, and how it becomes a section of docs/benchmarks.md.

Each part (bench/webhook.py, later bench/allocator.py and bench/e2e.py) returns a
`Section`. The runner renders it between two markers named after the part:

    <!-- bench:webhook -->
    ...generated...
    <!-- /bench:webhook -->

and replaces only that span when the part runs again; everything outside the
markers (the page's head, hand-written findings, other parts' sections) stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

DOC_HEAD = """# Benchmarks

`make bench` measures, in one run and side by side on one machine, and rewrites the sections
below (each between its `bench:` markers; text outside them is kept). `make bench BENCH=webhook`
runs one part only; `BENCH_ARGS='--rounds 3'` passes options to `python -m bench.run`
(`--help` lists them). Figures to compare are ratios measured in the same run: absolute times
depend on how busy the shared machine was and are given as context only.
"""


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    title: str = ""

    def markdown(self) -> str:
        out = [f"**{self.title}**", ""] if self.title else []
        out.append("| " + " | ".join(self.headers) + " |")
        out.append("|" + "|".join("---" for _ in self.headers) + "|")
        out += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        return "\n".join(out)


@dataclass
class Goal:
    what: str  # "/mutate, Mthreads pod, c=4: req/s ≥ 80% of bare"
    measured: str  # "87%"
    met: bool


@dataclass
class Section:
    part: str  # the marker name, e.g. "webhook"
    title: str
    intro: str = ""
    conditions: list[tuple[str, str]] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)  # the first one holds the rows
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[list[str]]:
        return self.tables[0].rows if self.tables else []

    def markdown(self) -> str:
        out = [f"## {self.title}", ""]
        if self.intro:
            out += [self.intro.strip(), ""]
        if self.conditions:
            out += ["**Conditions**", ""]
            out += [f"- {k}: {v}" for k, v in self.conditions]
            out.append("")
        for t in self.tables:
            out += [t.markdown(), ""]
        if self.goals:
            met = sum(g.met for g in self.goals)
            goals = Table(["goal", "measured", ""],
                          [[g.what, g.measured, "met" if g.met else "**missed**"]
                           for g in self.goals],
                          f"Goals: {met} of {len(self.goals)} met")
            out += [goals.markdown(), ""]
        for n in self.notes:
            out += [n.strip(), ""]
        return "\n".join(out).rstrip() + "\n"


def _markers(part: str) -> tuple[str, str]:
    return f"<!-- bench:{part} -->", f"<!-- /bench:{part} -->"


def update_doc(path: Path, section: Section) -> None:
    """Replace the part's span in the doc (or append it); keep everything else."""
    text = path.read_text(encoding="utf-8") if path.exists() else DOC_HEAD
    start, end = _markers(section.part)
    block = f"{start}\n{section.markdown()}{end}"
    span = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if span.search(text):
        text = span.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
