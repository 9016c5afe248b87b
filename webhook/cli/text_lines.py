"""Lines of text for a terminal that never cut a name: kubectl never does, and a pod's name cut
to fit 80 columns is a name the reader cannot use."""

from __future__ import annotations

import textwrap


def wrap(text: str, width: int | None, indent: str = "    ") -> list[str]:
    """`text` in lines of at most `width` columns (None: one line), broken at spaces only:
    a word longer than the width (a long namespace/name) stands whole on its line."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def pack(names: list[str], room: int | None, separator: str = ", ") -> list[str]:
    """The names on as few lines of at most `room` columns as they fill (None: one line), in
    their order, each whole; a name longer than `room` has a line of its own."""
    if room is None:
        return [separator.join(names)]
    lines: list[str] = []
    for i, name in enumerate(names):
        item = name + (separator.rstrip() if i < len(names) - 1 else "")
        if lines and len(lines[-1]) + 1 + len(item) <= room:
            lines[-1] += " " + item
        else:
            lines.append(item)
    return lines
