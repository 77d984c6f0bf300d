"""``farm audit``: published wheels judged against their **own** provenance.

A wheel's provenance is its embedded ``_build_info.json``, else its ledger entry (by sha256, then
by file name). The one judge (:func:`farm.provenance.judge.judge`, under :data:`AUDIT`) finds
what is wrong; the audit sums its findings up in one verdict per wheel:

- ``ok``: the binary holds what its provenance says it was built for, and today's policy agrees;
- ``wheel-wrong``: the binary differs from its provenance (or the ledger records other bytes
  under its name): a defect;
- ``config-moved``: the binary matches its provenance but today's policy resolves another list:
  bump ``build_epoch`` to rebuild;
- ``unledgered``: no provenance at all (``farm backfill`` records what inspection can say);
- ``inferred``: its only provenance is a backfilled guess, which matches the binary.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from farm.model.arch import ArchList
from farm.provenance import buildinfo
from farm.provenance.buildinfo import BuildInfo, LedgerEntry
from farm.provenance.crawl import Located, iter_wheels
from farm.provenance.judge import AUDIT, Check, Derive, WheelFinding
from farm.provenance.judge import judge as judge_wheel
from farm.provenance.ledger import LedgerIndex
from farm.provenance.wheelfacts import WheelFacts, wheel_facts


class AuditVerdict(str, enum.Enum):
    OK = "ok"
    WHEEL_WRONG = "wheel-wrong"
    CONFIG_MOVED = "config-moved"
    UNLEDGERED = "unledgered"
    INFERRED = "inferred"


@dataclass(frozen=True)
class AuditRow:
    filename: str
    location: str
    verdict: AuditVerdict
    source: str | None  # where the provenance came from: embedded | ledger | None
    reasons: tuple[str, ...]
    found: Mapping[str, ArchList] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"filename": self.filename, "location": self.location, "verdict": self.verdict.value,
                "provenance_source": self.source, "reasons": list(self.reasons),
                "found": {so: archs.canonical() for so, archs in self.found.items()}}


def judge(facts: WheelFacts, ledger_entry: LedgerEntry | None, today: Mapping[str, ArchList] | None,
          *, ledger_sha256_for_name: str | None = None, superseded_by: str | None = None) -> AuditRow:
    """The verdict for one wheel from its facts, its ledger entry and today's expected lists.

    ``superseded_by``: the published wheel of the same cell at a later build_epoch that holds
    today's lists (the rebuild this wheel's config-moved verdict asked for has happened)."""
    findings = judge_wheel(facts, ledger_entry, ledger_sha256_for_name, replace(AUDIT, today=today))
    return summarise(facts, ledger_entry, findings, compared=today is not None, superseded_by=superseded_by)


def summarise(facts: WheelFacts, ledger_entry: LedgerEntry | None, findings: Iterable[WheelFinding], *,
              compared: bool, superseded_by: str | None = None) -> AuditRow:
    """The audit's verdict on the judge's findings: anything wrong with the wheel first, then no
    provenance, an inferred one, a moved configuration."""

    def row(verdict: AuditVerdict, source: str | None, reasons: Iterable[str]) -> AuditRow:
        return AuditRow(facts.filename, facts.location, verdict, source, tuple(reasons), facts.found)

    findings = list(findings)
    if facts.problem:
        return row(AuditVerdict.WHEEL_WRONG, None, [r for f in findings for r in f.reasons])
    provenance = facts.embedded if facts.embedded is not None else (
        ledger_entry.info if ledger_entry is not None else None)
    source = "embedded" if facts.embedded is not None else "ledger"
    wrong = [f for f in findings if f.check not in (Check.CONFIG, Check.STAMPED)]
    if wrong:
        return row(AuditVerdict.WHEEL_WRONG, source, [r for f in wrong for r in f.reasons])
    if provenance is None:
        return row(AuditVerdict.UNLEDGERED, None, [r for f in findings for r in f.reasons])
    if provenance.provenance == buildinfo.INFERRED:
        return row(AuditVerdict.INFERRED, source, ["provenance was inferred by backfill, not asserted at build time"])
    moved = [r for f in findings if f.check is Check.CONFIG for r in f.reasons]
    if moved:
        advice = (f"superseded by {superseded_by}, published with today's lists: nothing to rebuild"
                  if superseded_by else "bump build_epoch to rebuild")
        return row(AuditVerdict.CONFIG_MOVED, source, [*moved, advice])
    if not compared:
        return row(AuditVerdict.OK, source, ["not compared with today's policy (no config for this cell)"])
    return row(AuditVerdict.OK, source, [])


def located_facts(located: Located) -> WheelFacts:
    """The wheel's facts, its device code's toolkit records among them: a wheel labelled for one
    CUDA line whose binaries another toolkit made is wrong whatever its provenance says."""
    facts = wheel_facts(located.path, location=located.location, made_by=True)
    return replace(facts, problem=located.problem) if located.problem else facts


def ledger_entry_of(ledger: LedgerIndex, facts: WheelFacts) -> tuple[LedgerEntry | None, str | None]:
    """The ledger entry with this wheel's bytes (schema-validated), and the sha256 recorded for
    its file name."""
    by_name = ledger.by_filename(facts.filename)
    rec = ledger.by_sha256(facts.sha256)
    entry = ledger.ledger_entry(rec) if rec is not None else None
    return entry, by_name.sha256 if by_name is not None else None


def audit(where: str | Iterable[Located], ledger: LedgerIndex, derive: Derive | None = None, *,
          progress: Callable[[AuditRow], None] | None = None) -> list[AuditRow]:
    """One row per wheel under ``where`` (or of the :class:`Located` wheels it yields, e.g.
    :func:`iter_wheels` with a shard, or :func:`fleet_wheels`); ``progress`` sees each row as it
    is made. A downloaded wheel is judged before the next one is fetched, then deleted. ``derive``:
    what today's configuration expects of a provenance's cell (None: no configuration)."""
    rows = []
    newest: dict[tuple[Any, ...], Any] | None = None  # cell -> its latest-epoch asserted record, built on first use
    for located in iter_wheels(where) if isinstance(where, str) else where:
        facts = located_facts(located)
        entry, name_sha = ledger_entry_of(ledger, facts)
        provenance = facts.embedded if facts.embedded is not None else entry.info if entry is not None else None
        derived = derive(provenance) if derive is not None and provenance is not None \
            and provenance.provenance == buildinfo.ASSERTED else None
        today_map = derived.today(facts.found) if derived is not None else None
        superseded_by = None
        if today_map is not None and provenance is not None and today_map != provenance.archs.expected:
            if newest is None:
                newest = _newest_by_cell(ledger)
            superseded_by = _superseder(ledger, newest, provenance, today_map)
        rows.append(judge(facts, entry, today_map, ledger_sha256_for_name=name_sha, superseded_by=superseded_by))
        if progress is not None:
            progress(rows[-1])
    return rows


def _newest_by_cell(ledger: LedgerIndex) -> dict[tuple[Any, ...], Any]:
    newest: dict[tuple[Any, ...], Any] = {}
    for rec in ledger.records:
        if rec.key is None or rec.provenance != buildinfo.ASSERTED:
            continue
        k = rec.key
        cell, epoch = (k.package, k.version, k.cuda, k.torch, k.python, k.platform), k.build_epoch
        if cell not in newest or epoch > newest[cell].key.build_epoch:
            newest[cell] = rec
    return newest


def _superseder(ledger: LedgerIndex, newest: Mapping[tuple[Any, ...], Any], provenance: BuildInfo,
                today_map: Mapping[str, ArchList]) -> str | None:
    """The file name of a published, later-epoch wheel of the same cell built with today's lists."""
    cell = provenance.cell
    key = (provenance.package, provenance.version, cell.cuda, cell.torch, cell.python, cell.platform)
    rec = newest.get(key)
    if rec is None or provenance.build_epoch is None or rec.key.build_epoch <= provenance.build_epoch:
        return None
    entry = ledger.ledger_entry(rec)
    if not entry.published or entry.info.archs.expected != dict(today_map):
        return None
    return str(rec.filename)
