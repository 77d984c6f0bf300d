"""Where the ledger's records live: one file per package and build epoch.

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

:data:`SEGMENT_LIMIT` is where farm warns about a segment (well under GitHub's 50 MB warning).

Every reader of the ledger (the matrix, the gate, audit, the index, backfill, durations, cache
prune, the crawl of published wheels) gets its files from :func:`segments`: the folder's
segments in a stable order, or the one file of a ledger that is still a single ``ledger.jsonl``
(a repository that has not run ``farm ledger migrate``, or a ``--ledger FILE`` given by hand).
Writers put a record where :func:`segment_file` says. :func:`ledger_location` is a repository's
ledger. A file in the folder that is not a segment is refused by name, never skipped: a record
there would be invisible to the matrix and built again.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from farm.errors import LedgerError
from farm.filestamp import Stamp, stamp
from farm.model.config import LEDGER_DIR, LEDGER_FILE

README = "README.md"  # the folder's own note (and what keeps an empty ledger in git)
ATTEMPTS_FILE = "attempts.jsonl"  # a package's builds that ended without a wheel (farm/schedule/attempts.py)
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


def segment_for(entry: Mapping[str, Any]) -> tuple[str, int]:
    """(package, build epoch) of a ledger entry's segment: its recorded ones; an inferred entry
    without a package goes by its wheel's distribution name, without an epoch to epoch 0."""
    package = entry.get("package")
    if not isinstance(package, str) or not package:
        package = str(entry.get("filename") or "").split("-", 1)[0]
    epoch = entry.get("build_epoch")
    return package, epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else 0


def ledger_location(root: Path) -> Path:
    """The ledger of the farm repository at ``root``: its ``ledger/`` folder; a repository that
    still holds a single ``ledger.jsonl`` (and no folder) is read there until it migrates."""
    folder, single = Path(root) / LEDGER_DIR, Path(root) / LEDGER_FILE
    if single.exists():
        if folder.exists():
            raise LedgerError(f"both {LEDGER_DIR}/ and {LEDGER_FILE} are here: two ledgers", where=str(root),
                              hint=f"`farm ledger migrate` moves {LEDGER_FILE}'s records into the folder")
        return single
    return folder


def _refuse(path: Path, what: str) -> LedgerError:
    return LedgerError(f"{what}: not a ledger segment", where=str(path),
                       hint=f"a ledger folder holds only <package>/e<epoch>{SEGMENT_SUFFIX} files and {README}; "
                            "move anything else out of it")


def segments(ledger: Path) -> list[tuple[str, Path]]:
    """The files of the ledger at ``ledger``, as (segment name, path) in a stable order: the
    segments of a ledger folder, or ``("", ledger)`` for a single-file ledger. A missing
    ledger is a :class:`LedgerError`; so is a link, or a file the folder should not hold."""
    ledger = Path(ledger)
    try:
        info = os.lstat(ledger)
    except FileNotFoundError:
        raise LedgerError("no ledger here", where=str(ledger),
                          hint=f"a farm repository has a {LEDGER_DIR}/ folder (with its {README}); pass the "
                               "right --root or --ledger") from None
    if stat.S_ISREG(info.st_mode):
        return [("", ledger)]
    if not stat.S_ISDIR(info.st_mode):
        raise _refuse(ledger, "not a folder or a plain file")
    out: list[tuple[str, Path]] = []
    for path in sorted(ledger.iterdir()):
        top = path.name
        mode = os.lstat(path).st_mode
        if top == README and stat.S_ISREG(mode):
            continue
        if not stat.S_ISDIR(mode) or top.startswith("."):
            if top.startswith(".") and top.endswith((".tmp", ".part")):
                continue  # a writer's temp file (swept under the ledger's lock)
            raise _refuse(path, "not a package folder")
        for file in sorted(path.iterdir()):
            name = file.name
            if (name.startswith(".") and name.endswith((".tmp", ".part"))) or name == ATTEMPTS_FILE:
                continue
            if not stat.S_ISREG(os.lstat(file).st_mode) or not is_segment(f"{top}/{name}"):
                raise _refuse(file, "not a plain file named e<epoch>.jsonl")
            out.append((f"{top}/{name}", file))
    return out


def single_file(ledger: Path) -> bool:
    """Whether ``ledger`` is a single-file ledger: a file, or a ``.jsonl`` path not yet written."""
    ledger = Path(ledger)
    return ledger.is_file() or (not ledger.exists() and ledger.suffix == SEGMENT_SUFFIX)


def segment_file(ledger: Path, package: str, build_epoch: int) -> tuple[str, Path]:
    """(segment name, path) where a record of ``package`` at ``build_epoch`` goes: its segment of
    a ledger folder, or the one file of a single-file ledger."""
    ledger = Path(ledger)
    if single_file(ledger):
        return "", ledger
    name = segment_of(package, build_epoch)
    return name, ledger / name


def file_of(ledger: Path, segment: str) -> Path:
    """The file of ``segment`` (a name :func:`segments` gave) of the ledger at ``ledger``."""
    return Path(ledger) / segment if segment else Path(ledger)


def stamps(ledger: Path) -> dict[str, Stamp] | None:
    """Each file's stamp (:mod:`farm.filestamp`) by segment: any change to any segment, or a new
    one, changes it. None when there is no ledger."""
    if not Path(ledger).exists():
        return None
    return {name: stamp(path.stat()) for name, path in segments(ledger)}


def warn_sizes(ledger: Path) -> list[str]:
    """A line for each of the ledger's files over :data:`SEGMENT_LIMIT` (GitHub warns at 50 MB
    and refuses a push with a file over 100 MB)."""
    out = []
    for name, path in segments(ledger):
        size = path.stat().st_size
        if size > SEGMENT_LIMIT:
            fix = ("run `farm ledger migrate`: one file per package and epoch" if not name
                   else "a package's epoch this large is more cells than farm plans for: split the recipe")
            out.append(f"{path}: {size / 2**20:.0f} MB, near GitHub's {GITHUB_WARN_BYTES >> 20} MB warning and "
                       f"100 MB refusal of a pushed file; {fix}")
    return out
