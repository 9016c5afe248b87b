import pytest

from tests.harness.kube import REPO_ROOT

from . import pod_spec
from .containers import Container, build_image

MANIFESTS = [REPO_ROOT / "manifests" / "base" / name for name in ("webhook.yaml", "allocator.yaml")]


@pytest.fixture(scope="session")
def image() -> str:
    return build_image()


@pytest.fixture(scope="session")
def manifests() -> list[dict]:
    """The rendered manifests whose pod specs the containers run with (the tests find their
    containers by name, `webhook` and `allocator`); `helm template` output loads the same way."""
    return pod_spec.load_documents(*MANIFESTS)


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
        print(f"--- {c.log_path.name} (exit {code}, tail) ---\n{c.log()}")
