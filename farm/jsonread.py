"""The one bounded reader of JSON that farm did not write in this process: a build spec, a wave
plan, a manifest, a shard's done file, a cache entry, a toolkit stamp, an index page.

Whatever the file, reading it costs bounded time and memory: only a regular file is read (a FIFO
or ``/dev/zero`` given as a spec is refused before a byte is read), at most ``cap`` bytes of it; the
text must be UTF-8, no value nests deeper than :data:`MAX_DEPTH`, numbers have at most
:data:`MAX_DIGITS` characters and ``NaN`` / ``Infinity`` (which Python's ``json`` accepts, and no
file farm reads contains) are refused. Every refusal is a :class:`JsonInputError`, a ``ValueError``
with a message a caller puts into its own error family (a spec is bad input, a manifest an
unusable mirror, a cache a miss).
"""

from __future__ import annotations

import json
import os
import stat
from functools import partial
from typing import Any

MAX_DEPTH = 64  # farm's deepest record nests 5 levels; 64 leaves room and stops recursion in readers
MAX_DIGITS = 64  # a sha256 in hex is 64 characters; no number farm reads is longer than a size
MAX_BYTES = 16 << 20  # the default cap: a spec or a stamp is a few KB, a done file or plan a few MB


class JsonInputError(ValueError):
    """A JSON text (or file) farm refuses to read: too large, not UTF-8, too deep, a bad number."""


def _refuse_constant(name: str) -> Any:
    raise JsonInputError(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _number(text: str, kind: type) -> Any:
    if len(text) > MAX_DIGITS:
        raise JsonInputError(f"a number of {len(text):,} characters ({text[:16]}...): numbers are limited to "
                             f"{MAX_DIGITS} characters")
    value = kind(text)
    if kind is float and value in (float("inf"), float("-inf")):
        raise JsonInputError(f"the number {text} is out of range")
    return value


def _check_depth(value: object, limit: int) -> None:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            raise JsonInputError(f"values nest deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` parsed under the limits above; :class:`JsonInputError` (or ``json``'s own
    ``JSONDecodeError``, also a ``ValueError``) when it is not JSON farm reads."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=partial(_number, kind=int),
                           parse_float=partial(_number, kind=float))
    except RecursionError:
        raise JsonInputError(f"values nest deeper than {max_depth} levels") from None
    _check_depth(value, max_depth)
    return value


def read_bounded(path: str | os.PathLike[str], cap: int = MAX_BYTES) -> bytes:
    """At most ``cap`` bytes of ``path``; :class:`JsonInputError` when it holds more (a runaway
    file) or is no regular file (a FIFO would block the reader for good, a device never ends),
    ``OSError`` when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise JsonInputError("not a regular file (a FIFO, a device or a folder): not a file farm wrote")
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise JsonInputError(f"larger than {cap:,} bytes: not a file farm wrote")
    return data


def load_file(path: str | os.PathLike[str], cap: int = MAX_BYTES, *, max_depth: int = MAX_DEPTH) -> Any:
    """:func:`loads` of :func:`read_bounded`: ``OSError`` or ``ValueError``, nothing else."""
    return loads(read_bounded(path, cap), max_depth=max_depth)
