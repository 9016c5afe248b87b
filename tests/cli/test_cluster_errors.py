"""The cluster commands against the real API server: credentials it refuses are one line
naming the place they came from; the places kubectl looks at lead to a running command."""

import shutil
import urllib.request

import pytest

from tests.harness.kube import ADMIN, ALICE, free_ports
from tests.harness.process import LoggedProcess
from tests.harness.wait import wait_for

from .console import CONSOLE, assert_one_line, clean_env, run_console, write_kubeconfig

pytestmark = pytest.mark.cluster

FAILED = 1
COMMANDS = [["allocate", "--metrics-bind", "127.0.0.1:0"], ["extender", "--bind", "127.0.0.1:0"]]


def wrong_token(kube_cluster, path):
    return write_kubeconfig(path, kube_cluster.url, "not-a-token-the-server-knows",
                            kube_cluster.ca_file)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("place", ["--kubeconfig", "$KUBECONFIG", "~/.kube/config"])
def test_refused_credentials(kube_cluster, tmp_path, command, place):
    if place == "--kubeconfig":
        path = wrong_token(kube_cluster, tmp_path / "kubeconfig")
        out = run_console([*command, "--kubeconfig", str(path)], tmp_path)
    elif place == "$KUBECONFIG":
        path = wrong_token(kube_cluster, tmp_path / "kubeconfig")
        out = run_console(command, tmp_path, KUBECONFIG=str(path))
    else:
        path = wrong_token(kube_cluster, tmp_path / ".kube" / "config")
        out = run_console(command, tmp_path)
    assert_one_line(out, FAILED, kube_cluster.url, str(path), "refused the credentials", "401")


def test_credentials_without_the_right_to_list_nodes(kube_cluster, tmp_path):
    """alice is known to the API server and has no role that lets her list nodes."""
    out = run_console([*COMMANDS[0], "--kubeconfig", str(kube_cluster.kubeconfig(ALICE))],
                      tmp_path)
    assert_one_line(out, FAILED, kube_cluster.url, "403", 'User "alice" cannot list resource "nodes"')


@pytest.mark.parametrize("command, path", [
    (["allocate", "--namespace", "cli-start", "--metrics-bind"], "/healthz"),
    (["extender", "--bind"], "/healthz"),
])
@pytest.mark.parametrize("place", ["$KUBECONFIG", "~/.kube/config"])
def test_found_cluster_is_used(kube_cluster, tmp_path, command, path, place):
    admin = kube_cluster.kubeconfig(ADMIN)
    extra = {}
    if place == "$KUBECONFIG":  # a list: the missing file is skipped, as client-go does
        extra["KUBECONFIG"] = f"{tmp_path / 'absent'}:{admin}"
    else:
        (tmp_path / ".kube").mkdir()
        shutil.copy(admin, tmp_path / ".kube" / "config")
    address = f"127.0.0.1:{free_ports(1)[0]}"
    proc = LoggedProcess([str(CONSOLE), *command, address], tmp_path / "command.log",
                         env=clean_env(tmp_path, **extra)).start()
    url = f"http://{address}{path}"
    try:
        status = wait_for(lambda: urllib.request.urlopen(url, timeout=2).status, 60, 0.3,
                          what=f"{url} answering", alive=proc, retry_on=(OSError,))
        assert status == 200
    finally:
        assert proc.stop(20) == 0, proc.tail()
