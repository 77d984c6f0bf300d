"""Shared by farm's patch scripts: anchored text edits that are idempotent and fail closed.

``edit(path, label, edits, marker)`` replaces each anchor (the exact upstream text) with its
replacement, all or nothing, and only where each anchor is found exactly as often as expected
(once, or the count an edit names as its third item). A file that already
holds ``marker`` (a comment the replacements carry) is patched: a second run changes nothing. A
file without an anchor stops the build with ``file:line`` of the line nearest to what the anchor
expected, so the maintainer sees what upstream changed. Run from the folder the paths are relative to.

``std_block(own)``: Python source for setup.py defining ``_FARM_STD``, the C++ standard the build
compiles with: the package's own, raised to C++20 where torch's headers need it. torch 2.13's
headers use C++20 constructs MSVC refuses under C++17 (GCC and Clang accept them with a warning),
and from torch 2.14 ATen.h stops any compiler below C++20 ("#error C++20 or later compatible
compiler is required to use ATen"); torch's own extension builder picks C++20 from 2.13 on, but
only where a package passes no standard of its own. So: 20 with torch >= 2.14 everywhere, and
with torch 2.13 on Windows; the package's own otherwise (its build unchanged).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _indexes(text: str, anchor: str) -> list[int]:
    out, at = [], text.find(anchor)
    while at >= 0:
        out.append(at)
        at = text.find(anchor, at + 1)
    return out


def _missing(label: str, path: str, text: str, anchor: str) -> str:
    want = next((line.strip() for line in anchor.splitlines() if line.strip()), anchor.strip())
    lines = [line.strip() for line in text.splitlines()]
    near = difflib.get_close_matches(want, lines, n=1, cutoff=0.4)
    if near:
        return (f"{label}: {path}:{lines.index(near[0]) + 1}: expected {want!r}, found {near[0]!r}; "
                "upstream changed: review the patch")
    return f"{label}: {path}:1: {want!r} is not in the file; upstream changed: review the patch"


def edit(path: str, label: str, edits: list[tuple[str, str] | tuple[str, str, int]], marker: str) -> bool:
    """Apply ``edits`` ((anchor, replacement[, count]); a replacement holds ``marker``) to
    ``path``; True when it changed the file, False when it was patched already."""
    file = Path(path)
    if not file.is_file():
        sys.exit(f"{label}: {path}:1: no such file; upstream changed: review the patch")
    text = file.read_text(encoding="utf-8")
    if marker in text:
        print(f"{label}: {path} already patched")
        return False
    new = text
    for anchor, replacement, *times in edits:
        expected = times[0] if times else 1
        count = new.count(anchor)  # lines are reported in the file as it is on disk (unchanged)
        if count == 0:
            sys.exit(_missing(label, path, text, anchor))
        if count != expected:
            lines = ",".join(str(_line_of(text, i)) for i in _indexes(text, anchor))
            sys.exit(f"{label}: {path}:{lines}: {anchor.strip()!r} appears {count} time(s), the patch expects "
                     f"{expected}; review the patch")
        new = new.replace(anchor, replacement)
    if marker not in new:  # the marker is what makes a second run a no-op
        sys.exit(f"{label}: no replacement carries the marker {marker!r}; fix the patch")
    file.write_text(new, encoding="utf-8")
    print(f"{label}: {path}: {len(edits)} edit(s)")
    return True


def std_block(own: int, indent: str = "") -> str:
    """setup.py source defining ``_FARM_STD`` (see the module's docstring)."""
    lines = [
        "# farm: the C++ standard: the package's own, C++20 where torch's headers need it",
        "# (torch >= 2.14; torch 2.13 under MSVC)",
        "import os as _farm_os",
        "import torch as _farm_torch",
        f"_FARM_STD = {own}",
        '_farm_torch_minor = tuple(int(v) for v in _farm_torch.__version__.split("+")[0].split(".")[:2])',
        'if _farm_torch_minor >= (2, 14) or (_farm_os.name == "nt" and _farm_torch_minor >= (2, 13)):',
        "    _FARM_STD = max(_FARM_STD, 20)",
    ]
    return "".join(f"{indent}{line}\n" for line in lines)
