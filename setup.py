"""The scheduling core compiled to C by mypyc (part of mypy), the rest of the package as is.

Why: kube-scheduler waits for each of the extender's /filter answers, so the CPU the extender
spends per pod sets the pace of that path (issue 37, docs/benchmarks.md). The core is already
checked by mypy --strict ([tool.mypy]); compiled, the same code takes a fifth less CPU per pod.
COMPILED lists the modules; tests/test_compiled.py checks that an install runs them compiled
and that none is older than its source.

`MTHREADS_PURE_PYTHON=1` builds without a C compiler: the same code, interpreted, slower.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))

# The decision's hot path: what the extender and the allocator run for every pod and event.
COMPILED = [
    "webhook/model/annotations.py",
    "webhook/model/cards.py",
    "webhook/model/hami.py",
    "webhook/base/json_types.py",
    "webhook/model/pods.py",
    "webhook/extender/decisions.py",
    "webhook/extender/wire.py",
    *sorted(f"webhook/scheduling/{name}" for name in os.listdir(os.path.join(HERE, "webhook/scheduling"))
            if name.endswith(".py") and name != "__init__.py"),
]


def compiled_modules():
    if os.environ.get("MTHREADS_PURE_PYTHON"):
        return []
    from mypyc.build import mypycify
    return mypycify(COMPILED, opt_level="3", debug_level="0", group_name="webhook_core")


if __name__ == "__main__":  # as setuptools runs it; the Makefile and tests read COMPILED alone
    from setuptools import setup

    setup(ext_modules=compiled_modules())
