"""Compact JSON text, byte for byte what ``json.dumps(value)`` writes, without importing :mod:`json`.

``import json`` compiles its decoder's and encoder's regular expressions on every start: about 2 ms,
a twentieth of ``farm inspect --json LIB``, for a command that never parses JSON. Strings go through
the C escaper that :mod:`json` itself uses. Values: dict (str or int keys), list, tuple, str, int,
float, bool, None, and :class:`Raw` (JSON text written as it is, for a part encoded on its own).
:func:`dump` hands the text to a writer piece by piece: a large part goes out without being copied
into one document first.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _string
except ImportError:  # pragma: no cover - an interpreter without json's C accelerator
    from json.encoder import encode_basestring_ascii as _string

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_FLOATS = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


class Raw:
    """JSON text that :func:`dump` writes as it is (the caller vouches that it is valid JSON): a
    string, or strings written one after the other. A generator of pieces hands a large part over
    without ever holding it whole, and is written once. A holder, not a ``str`` subclass, whose
    construction would copy the text."""

    __slots__ = ("text",)

    def __init__(self, text: str | Iterable[str]) -> None:
        self.text = text


def dumps(value: object) -> str:
    """``json.dumps(value)``: separators ``", "`` and ``": "``, non-ASCII escaped."""
    parts: list[str] = []
    dump(value, parts.append)
    return "".join(parts)


def dump(value: object, write: Callable[[str], object]) -> None:
    """:func:`dumps`, handed to ``write`` in pieces (``sys.stdout.write``)."""
    if isinstance(value, Raw):
        if isinstance(value.text, str):
            write(value.text)
        else:
            for piece in value.text:
                write(piece)
    elif isinstance(value, str):
        write(_string(value))
    elif value is None:
        write("null")
    elif value is True:
        write("true")
    elif value is False:
        write("false")
    elif isinstance(value, int):
        write(int.__repr__(value))
    elif isinstance(value, float):
        write("NaN" if value != value else _FLOATS.get(value) or float.__repr__(value))  # noqa: PLR0124 (NaN)
    elif isinstance(value, dict):
        write("{")
        for i, (key, item) in enumerate(value.items()):
            if isinstance(key, str):
                name = key
            elif isinstance(key, int) and not isinstance(key, bool):
                name = int.__repr__(key)
            else:
                raise TypeError(f"keys must be str or int, not {type(key).__name__}")
            write(f"{', ' if i else ''}{_string(name)}: ")
            dump(item, write)
        write("}")
    elif isinstance(value, (list, tuple)):
        write("[")
        for i, item in enumerate(value):
            if i:
                write(", ")
            dump(item, write)
        write("]")
    else:
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
