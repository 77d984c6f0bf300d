"""Compact JSON text, byte for byte what ``json.dumps(value)`` writes, without importing :mod:`json`.

``import json`` compiles its decoder's and encoder's regular expressions on every start: about 2 ms,
a twentieth of ``farm inspect --json LIB``, for a command that never parses JSON. Strings go through
the C escaper that :mod:`json` itself uses. Values: dict (str or int keys), list, tuple, str, int,
float, bool, None, and :class:`Raw` (JSON text written as it is, for a part encoded on its own).
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _string
except ImportError:  # pragma: no cover - an interpreter without json's C accelerator
    from json.encoder import encode_basestring_ascii as _string

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_FLOATS = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


class Raw(str):
    """JSON text that :func:`dumps` writes as it is (the caller vouches that it is valid JSON)."""

    __slots__ = ()


def dumps(value: object) -> str:
    """``json.dumps(value)``: separators ``", "`` and ``": "``, non-ASCII escaped."""
    parts: list[str] = []
    _write(value, parts.append)
    return "".join(parts)


def _write(value: object, out: Callable[[str], object]) -> None:
    if isinstance(value, Raw):
        out(value)
    elif isinstance(value, str):
        out(_string(value))
    elif value is None:
        out("null")
    elif value is True:
        out("true")
    elif value is False:
        out("false")
    elif isinstance(value, int):
        out(int.__repr__(value))
    elif isinstance(value, float):
        out("NaN" if value != value else _FLOATS.get(value) or float.__repr__(value))
    elif isinstance(value, dict):
        out("{")
        for i, (key, item) in enumerate(value.items()):
            if isinstance(key, str):
                name = key
            elif isinstance(key, int) and not isinstance(key, bool):
                name = int.__repr__(key)
            else:
                raise TypeError(f"keys must be str or int, not {type(key).__name__}")
            out(f"{', ' if i else ''}{_string(name)}: ")
            _write(item, out)
        out("}")
    elif isinstance(value, (list, tuple)):
        out("[")
        for i, item in enumerate(value):
            if i:
                out(", ")
            _write(item, out)
        out("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
