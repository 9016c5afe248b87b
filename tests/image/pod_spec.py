"""`podman run` options that apply a rendered Deployment's pod spec the way the kubelet does.

One place for the translation, fed by the chart as `helm template` renders it: the
container's user and groups, read-only root file system, no privilege escalation,
capabilities, its volumes (Secrets and ConfigMaps projected read-only with
their modes and the pod's fsGroup, emptyDirs as tmpfs, the service account token), its env and
its args with `$(VAR)` expanded. What the kubelet would do and this cannot is an error, not a
silent difference.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class PodSpecError(ValueError):
    """The pod spec uses something these options cannot reproduce."""


@dataclass(frozen=True)
class Workload:
    pod: dict  # the Deployment's spec.template.spec
    container: dict

    def volume(self, name: str) -> dict:
        for v in self.pod.get("volumes") or []:
            if v["name"] == name:
                return v
        raise PodSpecError(f"volumeMount {name!r} names no volume of the pod")

    def mount_path(self, name: str) -> str:
        for m in self.container.get("volumeMounts") or []:
            if m["name"] == name:
                return m["mountPath"]
        raise PodSpecError(f"container {self.container['name']!r} mounts no volume {name!r}")


def workload(documents: list[dict], container: str) -> Workload:
    """The container named `container` of a Deployment in the documents, with its pod spec."""
    for doc in documents:
        if doc.get("kind") != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        for c in pod["containers"]:
            if c["name"] == container:
                return Workload(pod, c)
    raise PodSpecError(f"no Deployment has a container named {container!r}")


def security(w: Workload) -> dict:
    """The effective security settings: the container's securityContext over the pod's."""
    pod_ctx = w.pod.get("securityContext") or {}
    ctx = {k: pod_ctx[k] for k in ("runAsUser", "runAsGroup", "runAsNonRoot") if k in pod_ctx}
    ctx.update(w.container.get("securityContext") or {})
    ctx["fsGroup"] = pod_ctx.get("fsGroup")
    ctx["supplementalGroups"] = pod_ctx.get("supplementalGroups") or []
    return ctx


def project(w: Workload, volume: str, files: dict[str, bytes], dest: Path) -> Path:
    """Write a Secret or ConfigMap volume's files as the kubelet does: the volume's defaultMode
    (0644 when unset), owned by root with the pod's fsGroup as their group when it has one."""
    v = w.volume(volume)
    source = v.get("secret") or v.get("configMap")
    if source is None:
        raise PodSpecError(f"volume {volume!r} is neither a Secret nor a ConfigMap")
    mode = source.get("defaultMode", 0o644)
    group = security(w)["fsGroup"] or 0
    dest.mkdir(parents=True, exist_ok=True)
    os.chown(dest, 0, group)
    dest.chmod(0o755 if not group else 0o2755)
    for name, data in files.items():
        path = dest / name
        path.write_bytes(data)
        os.chown(path, 0, group)
        path.chmod(mode)
    return dest


def expand_args(args: list[str], env: dict[str, str], overrides: dict[str, str]) -> list[str]:
    """`$(VAR)` expanded from the container's env; then each `--flag` in `overrides` gets the
    given value (replacing `--flag=x` or `--flag x`, else appended)."""
    def one(arg: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)
    out = [one(a) for a in args]
    for flag, value in overrides.items():
        for i, a in enumerate(out):
            if a == flag:
                out[i + 1] = value
                break
            if a.startswith(flag + "="):
                out[i] = f"{flag}={value}"
                break
        else:
            out.append(f"{flag}={value}")
    return out


def container_env(w: Workload, fields: dict[str, str]) -> dict[str, str]:
    """The container's env; `valueFrom.fieldRef` is read from `fields` (fieldPath -> value)."""
    env = {}
    for e in w.container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if path not in fields:
            raise PodSpecError(f"env {e['name']}: no value for {e.get('valueFrom')!r}")
        env[e["name"]] = fields[path]
    return env


def run_options(w: Workload, *, volumes: dict[str, Path], fields: dict[str, str] | None = None,
                arg_overrides: dict[str, str] | None = None,
                service_account: tuple[Path, str, int] | None = None,
                args: list[str] | None = None) -> list[str]:
    """podman run options, then the image's arguments after a `--` marker (split by the caller).

    volumes: host directories for the Secret/ConfigMap volumes the container mounts (see
    project()); emptyDirs need none. service_account: (directory with token and ca.crt,
    API host, API port), mounted and announced as in a cluster unless the pod opts out.
    args: the container's args replaced altogether (a one-off command in the same pod).
    """
    ctx = security(w)
    if ctx.get("privileged"):
        opts = ["--privileged"]
    else:
        opts = []
    user = ctx.get("runAsUser")
    if ctx.get("runAsNonRoot") and user in (None, 0):
        raise PodSpecError("runAsNonRoot without a non-zero runAsUser: podman cannot check the image's user")
    if user is not None:
        opts += ["--user", f"{user}:{ctx['runAsGroup']}" if ctx.get("runAsGroup") is not None else str(user)]
    for group in [ctx["fsGroup"], *ctx["supplementalGroups"]]:
        if group is not None:
            opts += ["--group-add", str(group)]
    if ctx.get("readOnlyRootFilesystem"):
        # podman would add writable tmpfs on /tmp, /var/tmp and /run; the kubelet adds none.
        opts += ["--read-only", "--read-only-tmpfs=false"]
    if ctx.get("allowPrivilegeEscalation") is False:
        opts += ["--security-opt", "no-new-privileges"]
    caps = ctx.get("capabilities") or {}
    opts += [x for cap in caps.get("drop") or [] for x in ("--cap-drop", cap)]
    opts += [x for cap in caps.get("add") or [] for x in ("--cap-add", cap)]
    seccomp = (ctx.get("seccompProfile") or (w.pod.get("securityContext") or {}).get("seccompProfile")
               or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        opts += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise PodSpecError(f"seccompProfile {seccomp!r} is not reproduced here")

    for m in w.container.get("volumeMounts") or []:
        if "subPath" in m:
            raise PodSpecError(f"volumeMount {m['name']!r}: subPath is not reproduced here")
        v = w.volume(m["name"])
        if "emptyDir" in v:
            size = (v["emptyDir"] or {}).get("sizeLimit", "64Mi").replace("Mi", "m").replace("Gi", "g")
            opts += ["--mount", f"type=tmpfs,destination={m['mountPath']},tmpfs-size={size},tmpfs-mode=1777"]
        elif "secret" in v or "configMap" in v:
            if m["name"] not in volumes:
                raise PodSpecError(f"volume {m['name']!r} needs a host directory (see project())")
            # Secret and ConfigMap volumes are read-only whatever the mount says.
            opts += ["-v", f"{volumes[m['name']]}:{m['mountPath']}:ro"]
        else:
            raise PodSpecError(f"volume {m['name']!r}: only emptyDir, secret and configMap are reproduced")

    env = container_env(w, fields or {})
    if service_account is not None and w.pod.get("automountServiceAccountToken") is not False:
        directory, host, port = service_account
        opts += ["-v", f"{directory}:{SERVICE_ACCOUNT_DIR}:ro"]
        env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port), **env}
    opts += [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    argv = expand_args(args if args is not None else w.container.get("args") or [], env,
                       arg_overrides or {})
    return [*opts, "--", *argv]
