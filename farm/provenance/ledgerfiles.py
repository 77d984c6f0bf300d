"""Where the ledger's records live: one file per package and build epoch (pure).

One ``ledger.jsonl`` grows by 18-34 MB at each epoch bump of the public farm's grid and is never
rotated, so it meets GitHub's 50 MB warning and 100 MB refusal of a pushed file within a few
bumps. The ledger is therefore a folder of segments, ``ledger/<package>/e<epoch>.jsonl``: a record
goes to the segment of its package and effective build epoch (:func:`segment_of`), and nothing
else ever moves it. Why this cut:

- a segment is written by one epoch of one package only: an epoch bump starts new files and
  leaves the old ones as they are (a record's ``published`` list still grows where it lies);
- its size is bounded by one package's grid at one epoch (a few MB at the public farm's scale:
  the largest package has ~1,500 cells of ~2 KB), whatever the number of bumps;
- no compaction: nothing is rewritten or moved, so history and ``git blame`` stay readable and a
  rebase of two publish jobs' commits conflicts only where both recorded the same package's epoch.

:data:`SEGMENT_LIMIT` is where farm refuses to write a segment (well under GitHub's 50 MB warning).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from farm.errors import LedgerError

LEDGER_DIR = "ledger"
SEGMENT_SUFFIX = ".jsonl"
# GitHub warns about a pushed file over 50 MB and refuses one over 100 MB (GH001).
GITHUB_WARN_BYTES = 50 * 1024 * 1024
SEGMENT_LIMIT = 40 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SEGMENT = re.compile(r"e(\d+)\.jsonl")


def segment_of(package: str, build_epoch: int) -> str:
    """The segment (a path relative to the ledger folder, ``/``-separated) that holds the records
    of ``package`` at ``build_epoch``."""
    if not _NAME.fullmatch(package) or build_epoch < 0:
        raise LedgerError(f"no ledger segment for package {package!r} at epoch {build_epoch}",
                          hint="a record names its package (letters, digits, '.', '_', '-') and an epoch >= 0")
    return f"{package}/e{build_epoch}{SEGMENT_SUFFIX}"


def is_segment(relative: str) -> bool:
    """Whether ``relative`` (``/``-separated, inside the ledger folder) names a segment."""
    parts = relative.split("/")
    return len(parts) == 2 and bool(_NAME.fullmatch(parts[0])) and bool(_SEGMENT.fullmatch(parts[1]))


def segment_sizes(records: Iterable[tuple[str, int, int]]) -> dict[str, int]:
    """Bytes per segment for records given as (package, build epoch, line bytes)."""
    sizes: Counter[str] = Counter()
    for package, epoch, size in records:
        sizes[segment_of(package, epoch)] += size
    return dict(sizes)
