"""A file published under a wheel's name that the ledger does not record (a GitHub release
asset, a file of the static index): adopt it or name it an orphan.

A publish killed between an upload and its ledger record leaves such a file. The rebuild of that
cell is the same file when the build is reproducible (docs/reproducible.md): it is simply there,
and recorded. A rebuild that is not (another toolkit patch release, a package that stamps its own
build) has other bytes, and "same name, other sha256" would otherwise stop the cell for good. The
file is read (a release asset downloaded, at most the size GitHub reports, which is under
GitHub's 2 GiB asset limit), its embedded provenance stands in for the lost ledger fragment, and
the publish's own gate runs on it (:func:`farm.publish.gate.run_gate`: asserted and passed, its
name, its consistency, today's configuration, a fresh inspection). Its provenance must also
describe the cell and build epoch of the wheel being published. A file that passes is adopted
(the ledger records it, and the new build is not published); one that fails is an orphan,
reported with its reasons, to be deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from farm.errors import FarmError
from farm.fsutil import sha256_file
from farm.provenance.buildinfo import BuildInfo, LedgerEntry, read_wheel
from farm.provenance.ledgerline import ExistsKey

# The publish's gate for one wheel that ``entry`` alone vouches for: a line per refusal.
Regate = Callable[[Path, LedgerEntry], list[str]]


@dataclass(frozen=True)
class Reassertion:
    """``entry``: the ledger entry to record when the asset passes (None: an orphan, ``problems`` say why)."""

    filename: str
    sha256: str
    entry: LedgerEntry | None
    problems: tuple[str, ...]


def key_of(info: BuildInfo) -> ExistsKey | None:
    """The cell and epoch a provenance describes (None where an inferred one does not say)."""
    c = info.cell
    if None in (info.package, c.cuda, c.torch, c.python, c.platform, info.build_epoch):
        return None
    return ExistsKey(info.package, info.version, c.cuda, c.torch, c.python, c.platform,  # type: ignore[arg-type]
                     info.build_epoch)  # type: ignore[arg-type]


def reassert(path: Path, *, cell: ExistsKey, gate: Regate) -> Reassertion:
    """Judge the downloaded asset at ``path`` as the publish's ``gate`` judges a wheel it is
    given, with its own provenance as its voucher, for the cell ``cell``."""
    sha256 = sha256_file(path)
    try:
        info = read_wheel(path)
    except FarmError as exc:
        return Reassertion(path.name, sha256, None, (f"cannot read its provenance: {exc.message}",))
    if info is None:
        return Reassertion(path.name, sha256, None, ("it carries no _build_info.json: never asserted",))
    entry = LedgerEntry(info, path.name, sha256, path.stat().st_size)
    problems: list[str] = []
    if key_of(info) != cell:
        problems.append(f"its provenance describes {key_of(info)}, not the cell being published ({cell})")
    problems += gate(path, entry)
    return Reassertion(path.name, sha256, None if problems else entry, tuple(problems))
