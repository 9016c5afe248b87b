"""The modules setup.py compiles with mypyc, and which of them were built before their source
last changed.

An install builds them next to their sources (`pip install -e`, `make install`): a source
edited since would run as it was when built, so tests/conftest.py stops the session at once
on such a module, before any test runs the old code.
"""

import importlib.machinery
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def compiled_sources() -> list[str]:
    """setup.py's COMPILED: the sources mypyc compiles, relative to the repository."""
    return runpy.run_path(str(ROOT / "setup.py"), run_name="compiled_sources")["COMPILED"]


def module_name(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def stale(root: Path = ROOT) -> list[str]:
    """The compiled modules built before their source last changed, as 'source (changed after ... was built)'."""
    out = []
    for source in compiled_sources():
        path = root / source
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            built = path.with_name(path.stem + suffix)
            if built.exists() and built.stat().st_mtime < path.stat().st_mtime:
                out.append(f"{source} (changed after {built.name} was built)")
    return out
