"""Hardening tests (issue 6): fuzzing, limits, certificates, forged allocations.

Markers (registered here, so the rest of the suite is untouched):
- `hardening`: every test of this directory; they all run in `make test`.
- `fuzz`: the property-based tests. `make test` runs them with the `hardening` hypothesis
  profile (a few hundred cases each); `make fuzz` sets HYPOTHESIS_PROFILE=fuzz (tens of
  thousands each).
- `soak`: long load runs, skipped unless HYPOTHESIS_PROFILE=fuzz.

The profiles are applied per test (see `profile()`), never loaded globally, so other
hypothesis tests of the suite keep their own settings.
"""

from __future__ import annotations

import collections
import os

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "hardening")
FUZZING = PROFILE == "fuzz"

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.large_base_example]
settings.register_profile("hardening", max_examples=200, deadline=None,
                          suppress_health_check=_HEALTH, print_blob=True)
settings.register_profile("fuzz", max_examples=20_000, deadline=None,
                          suppress_health_check=_HEALTH, print_blob=True)

# Cases tried per property in this session, printed at the end (docs/reliability.md quotes them).
CASES: collections.Counter = collections.Counter()


def profile(scale: float = 1.0, **overrides) -> settings:
    """The settings of the active profile, with max_examples scaled for costlier properties."""
    name = PROFILE if PROFILE in ("hardening", "fuzz") else "hardening"
    base = settings.get_profile(name)
    return settings(base, max_examples=max(1, int(base.max_examples * scale)), **overrides)


def count_case(name: str) -> None:
    CASES[name] += 1


def pytest_configure(config):
    config.addinivalue_line("markers", "hardening: reliability tests of tests/hardening (issue 6)")
    config.addinivalue_line("markers", "fuzz: property-based fuzzing; long with HYPOTHESIS_PROFILE=fuzz")
    config.addinivalue_line("markers", "soak: long load runs, only with HYPOTHESIS_PROFILE=fuzz")


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason="soak run: only with HYPOTHESIS_PROFILE=fuzz (make fuzz)")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.hardening)
            if "soak" in item.keywords and not FUZZING:
                item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    if not CASES:
        return
    terminalreporter.section(f"hardening: cases tried (profile {PROFILE})")
    for name, n in sorted(CASES.items()):
        terminalreporter.write_line(f"{n:>8}  {name}")
    terminalreporter.write_line(f"{sum(CASES.values()):>8}  in all")
