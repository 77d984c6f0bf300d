"""Plain-text tables for human output (JSON output never goes through here)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, indent: str = "") -> str:
    """Left-aligned columns separated by two spaces, with a dashed rule under the headers.

    Every line starts with ``indent`` and ends without trailing spaces; ``None`` shows as nothing.
    """
    cells = [tuple(map(str, headers)), *[tuple(["" if c is None else str(c) for c in row]) for row in rows]]
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    # one %-format per line (thousands of rows for a large library): each cell padded to its column
    line = indent.replace("%", "%%") + "  ".join(f"%-{w}s" for w in widths)
    lines = [(line % row).rstrip() for row in cells]
    lines.insert(1, indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)
