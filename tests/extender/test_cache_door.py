"""The extender's cache (webhook/extender/cache.py) is its only door to the scheduling core:
no other module of webhook/extender reaches through it to the SchedulerCache (`.core`)."""

import ast
from pathlib import Path

import webhook.extender

EXTENDER = Path(webhook.extender.__file__).parent


def reaches_through(source: str) -> list[int]:
    """The lines of `source` that read an attribute named `core`."""
    return sorted(n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Attribute) and n.attr == "core")


def test_the_check_sees_a_reach_through():
    assert reaches_through("self.source.core.expire(now)\ncore = cache.core\n") == [1, 2]
    assert reaches_through("self.source.expire(now)\ncore = 1\n") == []


def test_only_the_extenders_cache_touches_the_core():
    modules = sorted(EXTENDER.glob("*.py"))
    assert {m.name for m in modules} >= {"cache.py", "verbs.py", "main.py"}
    found = {m.name: reaches_through(m.read_text()) for m in modules if m.name != "cache.py"}
    assert {name: lines for name, lines in found.items() if lines} == {}
