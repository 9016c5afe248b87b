"""Reading a YAML (or JSON) file given on the command line, with one line for each way it can
fail (the config file, `cards what-if`'s pod)."""

from __future__ import annotations

from typing import Any

import yaml


class YamlFileError(ValueError):
    """The file cannot be read or parsed; the message names the file and why."""


def load_yaml(path: str) -> list[Any]:
    """Every document of the file, in order (an empty file has none)."""
    try:
        with open(path, encoding="utf-8") as f:
            return list(yaml.safe_load_all(f))
    except OSError as e:
        raise YamlFileError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise YamlFileError(f"{path}: not a text file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlFileError(f"{path}: not valid YAML{where}") from None
    except ValueError:  # from int(): past Python's 4,300 digits; nothing else of YAML raises it
        raise YamlFileError(f"{path}: holds a number too long to read (more than 4,300 digits)") from None
