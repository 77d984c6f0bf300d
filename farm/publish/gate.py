"""The upload gate: every wheel of a batch is checked before anything is sent.

For each wheel: its embedded ``_build_info.json`` says ``asserted`` and ``passed``; its file name
agrees with the cell that provenance describes; the provenance is self-consistent (the requested
list parses to the recorded normalised list, which is the expected list of every extension
without a list of its own, which is what was found); the list the configuration resolves today
for the wheel's cell equals the requested one, extension by extension (else the config moved
between build and upload); a ledger entry or fragment holds this exact sha256 (and the same file
name and provenance), and no other under this name; a fresh inspection (both readers when
cuobjdump is available, and they must agree) finds exactly the recorded targets, in extensions
with the recorded sha256. cuobjdump is the version the wheel's provenance records (the one its
assertion ran), never another: without it here the gate refuses to run (exit 3) and says which to
install. Each wheel is judged alone: the upload publishes the wheels that
passed and reports the refused ones, so one wheel's problem never stops another's publication.

:func:`farm.provenance.judge.judge` is the pure core, the same judge ``farm audit`` calls, here
under the gate's expectation (facts in, refusals out); :func:`run_gate` gathers the facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from farm.binary.cuobjdump import find_cuobjdump
from farm.errors import MAX_MESSAGE, FarmError, ToolError, clip
from farm.provenance.buildinfo import BUILD_INFO_NAME, Attestation, BuildInfo, LedgerEntry
from farm.provenance.judge import GATE, Check, Derive, Derived, WheelFinding
from farm.provenance.judge import judge as judge_wheel
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX, read_fragment
from farm.provenance.wheelfacts import WheelFacts, wheel_facts
from farm.publish.wheelmeta import read_member


@dataclass(frozen=True)
class Refusal:
    wheel: str
    check: Check
    message: str
    fix: str

    @classmethod
    def of(cls, wheel: str, finding: WheelFinding) -> Refusal:
        return cls(wheel, finding.check, finding.message, finding.fix)

    def line(self) -> str:
        return f"{self.wheel}: {self.check.value}: {clip(self.message, MAX_MESSAGE)}; fix: {self.fix}"

    def to_json(self) -> dict[str, str]:
        return {"wheel": self.wheel, "check": self.check.value, "message": clip(self.message, MAX_MESSAGE),
                "fix": self.fix}


@dataclass(frozen=True)
class GatedWheel:
    """A wheel that passed: its facts, and the ledger entry (or fragment) that vouches for it."""

    path: Path
    filename: str
    sha256: str
    size: int
    build_info: BuildInfo
    entry: LedgerEntry
    entry_source: str  # "ledger" or "fragment"


@dataclass(frozen=True)
class GateResult:
    passed: tuple[GatedWheel, ...]
    refused: tuple[Refusal, ...]
    readers: str = "native"  # the re-inspection: "native", "native + cuobjdump X.Y.Z" (one per version)
    config_checked: bool = False  # each wheel's list was re-derived from the configuration

    @property
    def ok(self) -> bool:
        return not self.refused

    def lines(self) -> list[str]:
        return [r.line() for r in self.refused]


# --------------------------------------------------------------------------------------------
# Pure core: the one judge of a wheel (farm.provenance.judge) under the gate's expectation
# --------------------------------------------------------------------------------------------
def refusals(facts: WheelFacts, entry: LedgerEntry | None, same_name_sha256: str | None, *,
             derived: Derived | None = None, config_checked: bool = False) -> list[Refusal]:
    expect = replace(GATE, derived=derived, config_required=config_checked)
    return [Refusal.of(facts.filename, f) for f in judge_wheel(facts, entry, same_name_sha256, expect)]


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vouchers:
    """Where the gate looks for a wheel's ledger entry: the committed ledger and new fragments."""

    ledger: LedgerIndex | LedgerBook  # a publish reads through its open book (farm.provenance.ledgerbook)
    fragments: Mapping[str, LedgerEntry]  # sha256 -> entry

    @classmethod
    def load(cls, ledger_path: Path | None, fragment_dirs: Iterable[Path]) -> Vouchers:
        exists = ledger_path is not None and ledger_path.exists()
        index = LedgerIndex.load(ledger_path) if exists else LedgerIndex.empty()  # type: ignore[arg-type]
        return cls(index, read_fragments(fragment_dirs))

    @classmethod
    def of(cls, book: LedgerBook, fragment_dirs: Iterable[Path]) -> Vouchers:
        """The vouchers of a publish that holds the ledger open: the book is brought up to date
        (read again if anyone else changed the file), never re-read whole otherwise."""
        book.refresh()
        return cls(book, read_fragments(fragment_dirs))

    def by_sha256(self, sha256: str) -> tuple[LedgerEntry | None, str]:
        """The entry with this sha256 and where it came from: the ledger first (it holds what
        was already published), else a fragment of this batch."""
        rec = self.ledger.by_sha256(sha256)
        if rec is not None:
            return self.ledger.ledger_entry(rec), "ledger"
        if sha256 in self.fragments:
            return self.fragments[sha256], "fragment"
        return None, ""

    def attestation_of(self, filename: str) -> Attestation | None:
        """The ledger's record of the signed build provenance of ``filename`` (None: not attested)."""
        rec = self.ledger.by_filename(filename)
        found = self.ledger.ledger_entry(rec).attestation if rec is not None else None
        return found if isinstance(found, Attestation) else None

    def sha256_of_name(self, filename: str) -> str | None:
        """The sha256 the ledger (else a fragment) records for ``filename``."""
        rec = self.ledger.by_filename(filename)
        if rec is not None:
            return rec.sha256
        return next((e.sha256 for e in self.fragments.values() if e.filename == filename), None)


def read_fragments(fragment_dirs: Iterable[Path]) -> dict[str, LedgerEntry]:
    """sha256 -> entry of every ledger fragment in ``fragment_dirs`` (the first of a sha256 wins)."""
    fragments: dict[str, LedgerEntry] = {}
    for directory in fragment_dirs:
        if directory.is_dir():
            for frag in sorted(directory.glob(f"*{FRAGMENT_SUFFIX}")):
                entry, rec = read_fragment(frag)
                fragments.setdefault(rec.sha256, entry)
    return fragments


def recorded_cuobjdump(path: Path) -> str | None:
    """The cuobjdump version a wheel's provenance says its assertion ran (None: none, or no
    readable provenance, which the judge refuses on its own)."""
    try:
        raw = read_member(path, BUILD_INFO_NAME)
        assertion = BuildInfo.from_json(raw, where=path.name).assertion if raw is not None else None
    except FarmError:
        return None
    return assertion.cuobjdump if assertion is not None else None


class GateReaders:
    """The re-inspection's readers for each wheel: the native one, and cuobjdump of the version
    the wheel records (found once per version). ``reader``: ``auto`` (both where the wheel records
    a cuobjdump), ``both`` (a wheel that records none is refused by its inspection) or ``native``."""

    def __init__(self, reader: str = "auto") -> None:
        self.reader = reader
        self.tools: dict[str, Path] = {}
        self.used: set[str] = set()

    def of(self, recorded: str | None) -> tuple[str, Path | None]:
        if self.reader == "native" or recorded is None:
            if self.reader == "both":
                raise ToolError("--reader both: a wheel's provenance records no cuobjdump version to run",
                                hint="gate it with --reader auto or native")
            self.used.add("native")
            return "native", None
        if recorded not in self.tools:  # never another version: its listing could differ
            self.tools[recorded] = find_cuobjdump(version=recorded)
        self.used.add(f"native + cuobjdump {recorded}")
        return "both", self.tools[recorded]

    def describe(self) -> str:
        return ", ".join(sorted(self.used)) or ("native" if self.reader == "native" else "none (no wheel)")


def run_gate(wheels: Iterable[Path], vouchers: Vouchers, *, derive: Derive | None = None,
             reader: str = "auto") -> GateResult:
    """Check every wheel; nothing is sent by the caller unless ``result.ok``.

    ``derive``: today's expectation for a provenance's cell (:func:`farm.provenance.judge.derive_from_config`);
    the command always passes it. ``reader``: ``auto`` (both readers when cuobjdump is found),
    ``both`` or ``native``."""
    readers = GateReaders(reader)
    passed: list[GatedWheel] = []
    refused: list[Refusal] = []
    for path in sorted(Path(p) for p in wheels):
        name = path.name
        # The bytes' sha256, the readers' targets and each extension's sha256 now, and the
        # embedded provenance (schema-checked, so a hostile file cannot crash the judge).
        kind, tool = readers.of(recorded_cuobjdump(path))
        facts = wheel_facts(path, reader=kind, cuobjdump=tool, made_by=True)
        if facts.problem:
            refused.extend(refusals(facts, None, None))
            continue
        entry, source = vouchers.by_sha256(facts.sha256)
        derived = derive(facts.embedded) if derive is not None and facts.embedded is not None else None
        problems = refusals(facts, entry, vouchers.sha256_of_name(name), derived=derived,
                            config_checked=derive is not None)
        if problems:
            refused.extend(problems)
        else:
            assert entry is not None
            assert facts.embedded is not None
            passed.append(GatedWheel(path, name, facts.sha256, facts.size, facts.embedded, entry, source))
    return GateResult(tuple(passed), tuple(refused), readers.describe(), derive is not None)

