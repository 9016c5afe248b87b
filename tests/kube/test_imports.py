"""The long-running commands start without importing the kubernetes package (0.22 s of the
extender's 0.38 s of imports): webhook/kube/client_config.py reads their configuration, and
api.py imports the package only for what it declines (tests/kube/test_client_config.py)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.process  # a child Python each


@pytest.mark.parametrize("module", ["webhook.extender.main", "webhook.allocator.main",
                                    "webhook.cli.main", "webhook.cli.cluster_probe"])
def test_the_commands_import_no_kubernetes(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    assert out.strip() == "[]"
