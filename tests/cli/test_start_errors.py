"""Each bad start of the installed `mthreads-webhook` gives one line and its exit code (issue 13.4).

No API server here: the cluster commands check their flags and addresses before they look
for a cluster, and the cluster found (or not) is judged before any request is made.
"""

import pytest

from tests.harness.kube import free_ports

from .console import assert_one_line, listening_socket, run_console, write_kubeconfig

USAGE, FAILED = 2, 1

# (command, the flag that names its listening address)
SERVERS = [(["serve"], "--bind"), (["extender"], "--bind"), (["extender"], "--metrics-bind"),
           (["allocate"], "--metrics-bind")]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """Flags with a good serving certificate: serve checks its files before its address."""
    from tests.harness.webhook import make_certs
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    return ["--cert-file", str(certs / "tls.crt"), "--key-file", str(certs / "tls.key")]


def with_certificate(command, certificate):
    return [*command, *certificate] if command[0] == "serve" else command
CLUSTER_COMMANDS = [["allocate", "--metrics-bind", "127.0.0.1:0"],
                    ["extender", "--bind", "127.0.0.1:0"]]


@pytest.mark.parametrize("command, flag", SERVERS, ids=lambda v: v if isinstance(v, str) else v[0])
@pytest.mark.parametrize("address, words", [
    ("nonsense", "expected HOST:PORT"),
    ("127.0.0.1:99999", "expected HOST:PORT"),
    ("::1:8443", "expected HOST:PORT"),  # a v6 address goes in brackets
    ("192.0.2.1:8443", "not an address of this machine"),  # TEST-NET-1, never local
    ("no-such-host.invalid:8443", "cannot resolve"),
])
def test_bad_bind_address_is_a_usage_error(tmp_path, certificate, command, flag, address, words):
    out = run_console([*with_certificate(command, certificate), flag, address], tmp_path)
    assert_one_line(out, USAGE, flag, address, words)


@pytest.mark.parametrize("address", ["0.0.0.0:0", ":0", "[::]:0"])
def test_the_extenders_verbs_listen_on_loopback_only(tmp_path, address):
    """Its verbs reserve and bind for whoever connects (docs/extender.md)."""
    out = run_console(["extender", "--bind", address], tmp_path)
    assert_one_line(out, USAGE, "--bind", address, "must listen on a loopback address")


@pytest.mark.parametrize("command, flag", SERVERS, ids=lambda v: v if isinstance(v, str) else v[0])
def test_port_in_use(tmp_path, certificate, command, flag):
    with listening_socket() as taken:
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        out = run_console([*with_certificate(command, certificate), flag, address], tmp_path)
    assert_one_line(out, FAILED, flag, address, "is in use")


@pytest.mark.parametrize("case", ["not a certificate", "no key file", "a directory"])
def test_unusable_certificate(tmp_path, certificate, case):
    cert, key = certificate[1], certificate[3]
    if case == "not a certificate":
        cert = tmp_path / "garbage.crt"
        cert.write_text("not a certificate\n")
    elif case == "no key file":
        key = tmp_path / "missing.key"
    else:
        cert = tmp_path
    out = run_console(["serve", "--bind", "127.0.0.1:0", "--cert-file", str(cert),
                       "--key-file", str(key)], tmp_path)
    assert_one_line(out, FAILED, "cannot load", str(cert), str(key))


@pytest.mark.parametrize("command", [["serve", "--bind", "127.0.0.1:0"], *CLUSTER_COMMANDS],
                         ids=lambda c: c[0])
def test_missing_config_file(tmp_path, command):
    missing = tmp_path / "absent.yaml"
    out = run_console([*command, "--config", str(missing)], tmp_path)
    assert_one_line(out, USAGE, "config", str(missing), "No such file")


def test_certs_into_a_path_that_cannot_be_a_directory(tmp_path):
    (tmp_path / "file").write_text("")
    out = run_console(["certs", "--out", str(tmp_path / "file" / "certs")], tmp_path)
    assert_one_line(out, FAILED, "--out", str(tmp_path / "file" / "certs"), "cannot write")


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_no_cluster_names_every_place_tried(tmp_path, command):
    out = run_console(command, tmp_path)
    assert_one_line(out, FAILED, "no cluster", "--kubeconfig (not given)", "$KUBECONFIG (not set)",
                    "in-cluster config (KUBERNETES_SERVICE_HOST/PORT not set)",
                    str(tmp_path / ".kube" / "config"))


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_missing_kubeconfig_file(tmp_path, command):
    missing = tmp_path / "absent-kubeconfig"
    out = run_console([*command, "--kubeconfig", str(missing)], tmp_path)
    assert_one_line(out, FAILED, "--kubeconfig", str(missing), "no such file")


def test_kubeconfig_variable_with_no_file_that_exists(tmp_path):
    listed = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    # a ~/.kube/config exists, and is not used instead: $KUBECONFIG says where to look
    write_kubeconfig(tmp_path / ".kube" / "config", "https://127.0.0.1:1", "t")
    out = run_console(CLUSTER_COMMANDS[0], tmp_path, KUBECONFIG=listed)
    assert_one_line(out, FAILED, f"$KUBECONFIG={listed}", "none of its files exists")


@pytest.mark.parametrize("content, words", [
    ("clusters: [\n", "while parsing"),
    ("apiVersion: v1\nkind: Config\n", "current-context"),
])
def test_kubeconfig_that_cannot_be_used(tmp_path, content, words):
    path = tmp_path / "kubeconfig"
    path.write_text(content)
    out = run_console([*CLUSTER_COMMANDS[0], "--kubeconfig", str(path)], tmp_path)
    assert_one_line(out, FAILED, str(path), "cannot use it", words)


@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: c[0])
def test_unreachable_api_server(tmp_path, command):
    port, = free_ports(1)  # closed again: nothing listens there
    path = write_kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}", "t")
    out = run_console([*command, "--kubeconfig", str(path)], tmp_path)
    assert_one_line(out, FAILED, "cannot reach", f"https://127.0.0.1:{port}", str(path),
                    "Connection refused")
