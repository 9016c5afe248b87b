"""Where the cluster commands look for a cluster, in order (webhook/cli/kubeconfig.py)."""

import pytest

from webhook.base.startup import StartupError
from webhook.cli.kubeconfig import find_cluster

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def places(tmp_path):
    """Every place holds a config; each case removes what it must not find."""
    paths = {name: tmp_path / name for name in ("flag", "env-a", "env-b", "sa/token")}
    paths["home"] = tmp_path / "home" / ".kube" / "config"
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return tmp_path, paths


def env(tmp_path, **extra):
    return {"HOME": str(tmp_path / "home"), **extra}


@pytest.mark.parametrize("flag, environ, removed, expected", [
    ("flag", {"KUBECONFIG": "env-a", **IN_CLUSTER}, [], "flag"),
    (None, {"KUBECONFIG": "env-a", **IN_CLUSTER}, [], "env-a"),
    (None, {"KUBECONFIG": "absent:env-b", **IN_CLUSTER}, [], "absent:env-b"),
    (None, IN_CLUSTER, [], None),
    (None, {}, [], "home"),  # no KUBERNETES_SERVICE_*: not in a cluster
    (None, IN_CLUSTER, ["sa/token"], "home"),  # the variables without the token: go on
])
def test_the_first_place_that_holds_a_config_wins(places, flag, environ, removed, expected):
    tmp_path, paths = places
    for name in removed:
        paths[name].unlink()

    def full(names):  # case tables name files relative to tmp_path
        return ":".join(str(paths[n]) if n in paths else str(tmp_path / n) for n in names.split(":"))
    environ = {k: full(v) if k == "KUBECONFIG" else v for k, v in environ.items()}
    source = find_cluster(str(paths[flag]) if flag else None, env(tmp_path, **environ),
                          in_cluster_dir=str(paths["sa/token"].parent))
    if expected is None:
        assert source.kubeconfig is None and source.description == "the in-cluster config"
    elif expected == "home":
        assert source.kubeconfig == str(paths["home"])
    else:
        assert source.kubeconfig == full(expected)


def test_nothing_found_names_every_place(tmp_path):
    with pytest.raises(StartupError) as e:
        find_cluster(None, {"HOME": str(tmp_path), **IN_CLUSTER}, in_cluster_dir=str(tmp_path))
    assert e.value.exit_code == 1
    assert str(e.value) == (
        "no cluster to talk to; tried --kubeconfig (not given), $KUBECONFIG (not set), "
        f"the in-cluster config ({tmp_path}/token: no such file), "
        f"{tmp_path}/.kube/config (no such file)")


@pytest.mark.parametrize("flag, environ, words", [
    ("absent", {}, "--kubeconfig {tmp}/absent: no such file"),
    (None, {"KUBECONFIG": "{tmp}/a:{tmp}/b"}, "$KUBECONFIG={tmp}/a:{tmp}/b: none of its files exists"),
])
def test_a_named_config_that_is_missing_is_an_error(tmp_path, flag, environ, words):
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("x")  # there, and not used instead
    environ = {k: v.format(tmp=tmp_path) for k, v in environ.items()}
    with pytest.raises(StartupError) as e:
        find_cluster(flag and str(tmp_path / flag), {"HOME": str(tmp_path), **environ})
    assert str(e.value) == words.format(tmp=tmp_path)
