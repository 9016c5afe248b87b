"""The modules setup.py compiles with mypyc run compiled, and none is older than its source
(tests/harness/compiled.py: tests/conftest.py stops a session at once on such a module, and
this checks that it does)."""

import importlib
import importlib.machinery
import os

import pytest

from tests import conftest
from tests.harness.compiled import compiled_sources, module_name, stale

PURE = bool(os.environ.get("MTHREADS_PURE_PYTHON"))  # built without mypyc on purpose


def test_the_hot_path_is_compiled():
    sources = compiled_sources()
    assert "webhook/scheduling/state.py" in sources and "webhook/model/hami.py" in sources
    assert "webhook/scheduling/__init__.py" not in sources
    for source in sources:
        module = importlib.import_module(module_name(source))
        compiled = module.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        assert compiled != PURE, (
            f"{module.__name__} is {'compiled' if compiled else 'not compiled'} ({module.__file__}): "
            + ("MTHREADS_PURE_PYTHON is set" if PURE else "run `make install`"))


@pytest.mark.parametrize("found", [[], ["webhook/model/hami.py (changed after hami.so was built)"]])
def test_a_session_does_not_start_on_a_module_built_before_its_source(monkeypatch, found):
    """tests/conftest.py ends the session before any test when `stale()` names a module (so
    no test here could see one: what this checks is that conftest asks and stops)."""
    monkeypatch.setattr(conftest, "stale", lambda: found)
    if not found:
        conftest.pytest_sessionstart(None)
        return
    with pytest.raises(pytest.exit.Exception) as stopped:
        conftest.pytest_sessionstart(None)
    assert stopped.value.returncode == 4 and found[0] in stopped.value.msg


@pytest.mark.parametrize("source_after_build, expected", [(False, 0), (True, 1)])
def test_stale_finds_a_source_edited_after_the_build(tmp_path, source_after_build, expected):
    source = "webhook/model/hami.py"
    path = tmp_path / source
    path.parent.mkdir(parents=True)
    path.write_text("")
    built = path.with_name("hami" + importlib.machinery.EXTENSION_SUFFIXES[0])
    built.write_bytes(b"")
    stamp = path.stat().st_mtime
    os.utime(built, (stamp, stamp + (-10 if source_after_build else 10)))
    for other in compiled_sources():  # the rest: sources only, nothing built
        (tmp_path / other).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / other).touch()
    found = stale(tmp_path)
    assert len(found) == expected
    if expected:
        assert found[0].startswith("webhook/model/hami.py (changed after hami")
