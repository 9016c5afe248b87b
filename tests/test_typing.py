"""mypy --strict on the scheduling core, the admission rules and the domain modules they
import (issue 33): which files and which flags is pyproject.toml's [tool.mypy]."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_strict(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, f"mypy reports errors:\n{result.stdout}{result.stderr}"
