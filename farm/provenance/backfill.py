"""``farm backfill``: ``inferred`` ledger entries for published wheels that have no provenance,
from what inspection and the file name can say (nothing guessed beyond them).
"""

from __future__ import annotations

import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name

from farm.errors import LedgerError, WheelError
from farm.model.label import parse_local_label
from farm.provenance import buildinfo
from farm.provenance.audit import ledger_entry_of, located_facts
from farm.provenance.buildinfo import LedgerEntry, Published
from farm.provenance.crawl import iter_wheels
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import merge_fragments, write_fragment
from farm.provenance.postbuild import cell_platform, cell_python
from farm.provenance.stamp import WheelName
from farm.provenance.wheelfacts import WheelFacts

if TYPE_CHECKING:
    from farm.model.config import FarmConfig


def inferred_cell(name: WheelName) -> dict[str, str | None]:
    """What a wheel's name says of its cell; ``None`` for what it does not say."""
    label = parse_local_label(name.local)  # farm's label drops torch for torch-free packages
    cuda, torch = (label.cuda, label.torch) if label is not None else (None, None)
    try:
        python: str | None = cell_python(name)
    except WheelError:
        python = None
    try:
        platform: str | None = cell_platform(name)
    except WheelError:
        platform = None
    return {"cuda": cuda, "torch": torch, "python": python, "platform": platform}


def inferred_entry(facts: WheelFacts, *, package: str | None = None) -> LedgerEntry:
    """The ledger entry backfill writes: inspection and the name, nothing guessed beyond them."""
    name = WheelName.parse(facts.filename)
    info = buildinfo.inferred_build_info(
        dist=name.dist, version=name.public_version, cell=inferred_cell(name),
        found={so: archs.canonical() for so, archs in facts.found.items()},
        extensions=facts.extensions, package=package,
    )
    published = ((Published(urllib.parse.urlsplit(facts.location).netloc, facts.location),)
                 if facts.location.startswith(("http://", "https://")) else ())
    return info.ledger_entry(filename=facts.filename, sha256=facts.sha256, size=facts.size, published=published)


@dataclass(frozen=True)
class BackfillResult:
    ledger: Path
    added: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (filename, why)

    def to_json(self) -> dict[str, Any]:
        return {"ledger": str(self.ledger), "added": list(self.added),
                "skipped": [{"filename": f, "reason": r} for f, r in self.skipped]}


def _package_for(config: FarmConfig | None, dist: str) -> str | None:
    if config is None:
        return None
    matches = [r.name for r in config.recipes.values() if canonicalize_name(r.dist) == canonicalize_name(dist)]
    return matches[0] if len(matches) == 1 else None


def backfill(where: str, ledger_path: Path, *, config: FarmConfig | None = None) -> BackfillResult:
    """Write ``inferred`` ledger entries for the wheels under ``where`` that have no provenance.

    Entries go through fragments and the ledger's locked merge, like every other ledger write.
    """
    ledger_path = Path(ledger_path)
    ledger = LedgerIndex.load(ledger_path) if ledger_path.exists() else LedgerIndex.empty()
    skipped: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="farm-backfill-") as tmp:
        fragments = Path(tmp)
        for located in iter_wheels(where):
            facts = located_facts(located)
            entry, name_sha = ledger_entry_of(ledger, facts)
            if facts.problem:
                skipped.append((facts.filename, f"unreadable: {facts.problem}"))
            elif facts.embedded is not None:
                skipped.append((facts.filename, "has embedded provenance"))
            elif entry is not None or name_sha is not None:
                skipped.append((facts.filename, "already in the ledger"))
            else:
                name = WheelName.parse(facts.filename)
                try:
                    write_fragment(inferred_entry(facts, package=_package_for(config, name.dist)), fragments)
                except LedgerError as exc:  # the same file name twice with other bytes
                    skipped.append((facts.filename, str(exc)))
        if not any(fragments.iterdir()):
            return BackfillResult(ledger_path, (), tuple(skipped))
        result = merge_fragments(ledger_path, fragments)
    skipped += [(f, "already in the ledger") for f in result.already]
    return BackfillResult(ledger_path, result.added, tuple(skipped))
