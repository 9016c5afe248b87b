"""pytest plugin: one real etcd + kube-apiserver for the whole test session.

Load it with `pytest_plugins = ["tests.harness.fixtures"]` in the top-level conftest.
"""

import pytest

from tests.harness.kube import LocalCluster


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("kube")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
