"""A value as a one-line message quotes it: a long text cut short, a long integer by its number
of digits. Pods, node annotations and the config may hold megabytes of one (and Python will not
write an integer of more than 4,300 digits), so a message that repeated it whole would be as long,
or raise."""

from __future__ import annotations

from typing import Any, Callable

QUOTED = 64  # characters of a long text a message quotes


def shown(value: Any, quote: Callable[[Any], str] = repr) -> str:
    """`quote(value)`, unless `value` is a text longer than QUOTED or an integer past int64."""
    if isinstance(value, str) and len(value) > QUOTED:
        return f"{quote(value[:QUOTED])}... ({len(value)} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        digits = len(str(abs(value))) if value.bit_length() < 14_000 else "more than 4,200"
        return f"an integer of {digits} digits"
    return quote(value)
