"""The one configuration model (SPEC 2), loaded and checked once at start.

The file has the shape of the Helm values an operator already writes for HAMi.
Every check names the key's path, so a bad file stops the program with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.shown import shown
from ..base.yaml_files import YamlFileError, load_yaml

POLICIES = ("binpack", "spread")
MAX_INSTANCES = 16  # the vendor's max_inst ranges over 1..16
MAX_QUANTITY = 2**31 - 1  # of an Mthreads resource (SPEC 1), so of a card's units too


class ConfigError(ValueError):
    """A bad configuration file; the message names the key and what is wrong."""


@dataclass(frozen=True)
class MthreadsConfig:
    enabled: bool = True
    memory_per_card: tuple[int, ...] = (96,)
    count_resource: str = "mthreads.com/vgpu"
    memory_resource: str = "mthreads.com/sgpu-memory"
    core_resource: str = "mthreads.com/sgpu-core"
    # containers holding a share of one card, at most: the vendor's sGPU stack runs a bounded
    # number of instances per card (max_inst 1..16); a node annotation may set its own
    max_instances_per_card: int = MAX_INSTANCES


@dataclass(frozen=True)
class AllocatorConfig:
    user: str = "system:serviceaccount:kube-system:mthreads-allocator"
    extra_writers: tuple[str, ...] = ()
    node_policy: str = "binpack"
    gpu_policy: str = "spread"

    @property
    def writers(self) -> frozenset[str]:
        """The identities allowed to write allocation annotations."""
        return frozenset((self.user, *self.extra_writers))


@dataclass(frozen=True)
class Config:
    scheduler_name: str = "hami-scheduler"
    force_overwrite_default_scheduler: bool = True
    mthreads: MthreadsConfig = field(default_factory=MthreadsConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)


def load_config(path: str | None) -> Config:
    """Read and check a config file; no path means all defaults."""
    if path is None:
        return Config()
    try:
        documents = load_yaml(path)
    except YamlFileError as e:
        raise ConfigError(str(e)) from None
    if len(documents) > 1:
        raise ConfigError(f"{path}: holds {len(documents)} YAML documents; the config is one")
    try:
        return parse_config(documents[0] if documents else None)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def parse_config(data: Any) -> Config:
    """Build a Config from parsed YAML (None means an empty file)."""
    top = _mapping(data if data is not None else {}, "",
                   {"schedulerName", "forceOverwriteDefaultScheduler", "devices", "allocator"})
    devices = _mapping(top.get("devices", {}), "devices", {"mthreads"})
    mt = _mapping(devices.get("mthreads", {}), "devices.mthreads",
                  {"enabled", "memoryPerCard", "resourceCountName", "resourceMemoryName",
                   "resourceCoreName", "maxInstancesPerCard"})
    al = _mapping(top.get("allocator", {}), "allocator",
                  {"user", "extraWriters", "nodePolicy", "gpuPolicy"})
    d_mt, d_al, d_top = MthreadsConfig(), AllocatorConfig(), Config()
    return Config(
        scheduler_name=_string(top, "schedulerName", "", d_top.scheduler_name),
        force_overwrite_default_scheduler=_bool(
            top, "forceOverwriteDefaultScheduler", "", d_top.force_overwrite_default_scheduler),
        mthreads=MthreadsConfig(
            enabled=_bool(mt, "enabled", "devices.mthreads", d_mt.enabled),
            memory_per_card=_capacities(mt.get("memoryPerCard", list(d_mt.memory_per_card))),
            count_resource=_string(mt, "resourceCountName", "devices.mthreads", d_mt.count_resource),
            memory_resource=_string(mt, "resourceMemoryName", "devices.mthreads", d_mt.memory_resource),
            core_resource=_string(mt, "resourceCoreName", "devices.mthreads", d_mt.core_resource),
            max_instances_per_card=_instances(mt.get("maxInstancesPerCard",
                                                     d_mt.max_instances_per_card)),
        ),
        allocator=AllocatorConfig(
            user=_string(al, "user", "allocator", d_al.user),
            extra_writers=_strings(al.get("extraWriters", []), "allocator.extraWriters"),
            node_policy=_policy(al, "nodePolicy", d_al.node_policy),
            gpu_policy=_policy(al, "gpuPolicy", d_al.gpu_policy),
        ),
    )


def _path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _mapping(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path or 'the file'}: must be a mapping, got {_kind(value)}")
    for key in value:
        if key not in allowed:
            raise ConfigError(f"{_path(path, str(key))}: unknown key "
                              f"(known: {', '.join(sorted(allowed))})")
    return value


def _string(m: dict[str, Any], key: str, parent: str, default: str) -> str:
    value = m.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{_path(parent, key)}: must be a non-empty string, got {_kind(value)}")
    return value


def _bool(m: dict[str, Any], key: str, parent: str, default: bool) -> bool:
    value = m.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{_path(parent, key)}: must be true or false, got {_kind(value)}")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{path}: must be a list of user names, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{path}[{i}]: must be a non-empty string, got {_kind(item)}")
    return tuple(value)


def _policy(m: dict[str, Any], key: str, default: str) -> str:
    value = m.get(key, default)
    if not isinstance(value, str) or value not in POLICIES:
        raise ConfigError(f"allocator.{key}: must be one of {', '.join(POLICIES)}, got {_kind(value)}")
    return value


def _capacities(value: Any) -> tuple[int, ...]:
    path = "devices.mthreads.memoryPerCard"
    if _is_int(value):  # the chart accepts a bare number for a one-model fleet
        value = [value]
    if not isinstance(value, list):
        raise ConfigError(f"{path}: must be a list of units per card, got {_kind(value)}")
    if not value:
        raise ConfigError(f"{path}: must list at least one card capacity")
    seen: set[int] = set()
    for i, item in enumerate(value):
        if not _is_int(item) or not 2 <= item <= MAX_QUANTITY:
            raise ConfigError(f"{path}[{i}]: must be a whole number of 512 MiB units, from 2 to "
                              f"{MAX_QUANTITY}, got {_kind(item)}")
        if item in seen:
            raise ConfigError(f"{path}[{i}]: {item} is listed twice")
        seen.add(item)
    return tuple(value)


def _instances(value: Any) -> int:
    if not _is_int(value) or not 1 <= value <= MAX_INSTANCES:
        raise ConfigError(f"devices.mthreads.maxInstancesPerCard: must be a whole number from 1 "
                          f"to {MAX_INSTANCES}, got {_kind(value)}")
    return int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str) or _is_int(value) and value.bit_length() > 64:
        return shown(value)
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) \
        else type(value).__name__
