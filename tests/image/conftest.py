import subprocess

import pytest
import yaml

from tests.harness.kube import REPO_ROOT
from tests.harness.kubectl import HELM

from .containers import Container, build_image

CHART = REPO_ROOT / "manifests" / "hami"


@pytest.fixture(scope="session")
def image() -> str:
    return build_image()


@pytest.fixture(scope="session")
def manifests() -> list[dict]:
    """The chart as `helm template` renders it with its defaults: the pod specs the containers
    run with (the tests find their containers by name, `webhook` and `allocator`)."""
    out = subprocess.run([HELM, "template", "hami", str(CHART), "--namespace", "kube-system"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture
def start_container(image, tmp_path):
    """Start containers of the image; each is stopped by SIGTERM at the end of the test."""
    started: list[Container] = []

    def start(options: list[str]) -> Container:
        c = Container(image, options, tmp_path / f"container-{len(started)}.log").start()
        started.append(c)
        return c

    yield start
    for c in started:
        code = c.stop()
        print(f"--- {c.log_path.name} (exit {code}, tail) ---\n{c.tail()}")
