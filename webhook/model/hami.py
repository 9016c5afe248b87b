"""HAMi's encoding of a pod's devices in annotations.

Per container, in order (init containers first): one `<card id>,Mthreads,<MiB>,<cores>:`
for each card it uses, then `;`. The webhook writes it with empty card ids (the
request); the allocator writes it with the chosen cards (the allocation).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from .cards import CORES_PER_CARD, UNIT_MIB, VENDOR
from .pods import Kind, PodRequest


@dataclass(frozen=True)
class Device:
    card: str  # "<node>-mthreads-<index>", or "" in a request
    memory_mib: int
    cores: int


class EncodingError(ValueError):
    pass


def request_devices(request: PodRequest) -> list[list[Device]]:
    """The devices each container asks for, with no card chosen yet."""
    units = request.models[0].units if request.kind is Kind.WHOLE else 0
    out: list[list[Device]] = []
    for a in request.asks:
        if a.kind is Kind.SLICE:
            out.append([Device("", a.slice_memory * UNIT_MIB, a.cores or 0)])
        elif a.kind is Kind.WHOLE:
            out.append([Device("", (a.memory or units) * UNIT_MIB, CORES_PER_CARD)] * a.cards)
        else:
            out.append([])
    return out


def encode(containers: Sequence[Sequence[Device]]) -> str:
    return "".join(
        "".join(f"{d.card},{VENDOR},{d.memory_mib},{d.cores}:" for d in devices) + ";"
        for devices in containers
    )


def decode(text: str) -> list[list[Device]]:
    """Parse an encoded annotation; raises EncodingError on anything malformed."""
    if not text.endswith(";"):
        raise EncodingError(f"{text!r} does not end with ';'")
    out: list[list[Device]] = []
    for part in text[:-1].split(";"):
        devices = []
        for entry in filter(None, part.split(":")):
            fields = entry.split(",")
            if len(fields) != 4 or fields[1] != VENDOR:
                raise EncodingError(f"{entry!r} is not <card>,{VENDOR},<MiB>,<cores>")
            try:
                memory, cores = int(fields[2]), int(fields[3])
            except ValueError:
                raise EncodingError(f"{entry!r} has a non-numeric memory or core count") from None
            if memory < 0 or cores < 0:
                raise EncodingError(f"{entry!r} has a negative memory or core count")
            devices.append(Device(fields[0], memory, cores))
        out.append(devices)
    return out


@lru_cache(maxsize=256)
def decode_kept(text: str) -> tuple[tuple[Device, ...], ...]:
    """`decode` as tuples, kept for the latest texts: a bound pod's annotation is read for its
    share and again for its holdings (metrics), in one watch event."""
    return tuple(tuple(devices) for devices in decode(text))
