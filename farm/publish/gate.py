"""The upload gate: every wheel of a batch is checked before anything is sent.

For each wheel: its embedded ``_build_info.json`` says ``asserted`` and ``passed``; its file name
agrees with the cell that provenance describes; the provenance is self-consistent (the requested
list parses to the recorded normalised list, which is the expected list of every extension
without a list of its own, which is what was found); the list the configuration resolves today
for the wheel's cell equals the requested one, extension by extension (else the config moved
between build and upload); a ledger entry or fragment holds this exact sha256 (and the same file
name and provenance), and no other under this name; a fresh inspection (both readers when
cuobjdump is available, and they must agree) finds exactly the recorded targets, in extensions
with the recorded sha256. One refused wheel refuses the whole batch: a partial upload leaves an
index that offers some cells and not others, which is worse than none.

:func:`judge` is the pure core (facts in, refusals out); :func:`run_gate` gathers the facts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import MAX_MESSAGE, FarmError, clip
from farm.model.arch import ArchList
from farm.provenance.buildinfo import BUILD_INFO_NAME, BuildInfo, Bundled, LedgerEntry, name_problems
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX, read_fragment

if TYPE_CHECKING:
    from farm.provenance.audit import Derive, Derived


class Check(str, enum.Enum):
    READABLE = "readable"
    STAMPED = "stamped"
    ASSERTED = "asserted"
    NAME = "name"
    CONSISTENT = "consistent"
    CONFIG = "config"
    LEDGER = "ledger"
    INSPECTION = "inspection"


@dataclass(frozen=True)
class Refusal:
    wheel: str
    check: Check
    message: str
    fix: str

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
    readers: str = "native"  # the re-inspection: "native" or "native + cuobjdump X.Y.Z"
    config_checked: bool = False  # each wheel's list was re-derived from the configuration

    @property
    def ok(self) -> bool:
        return not self.refused

    def lines(self) -> list[str]:
        return [r.line() for r in self.refused]


# --------------------------------------------------------------------------------------------
# Pure core
# --------------------------------------------------------------------------------------------
_FIX_POSTBUILD = "run `farm postbuild WHEEL --out DIR` on the built wheel and upload its output"
_FIX_REBUILD = "rebuild the cell (`farm build`); a wheel changed after postbuild is never uploaded"


def _archs(text: str | None) -> frozenset[str]:
    if not text:
        return frozenset()
    return frozenset(ArchList.parse(text).names())


def _archs_or_none(text: object) -> frozenset[str] | None:
    """The targets of a recorded list, or None when it does not parse (a forged provenance)."""
    if not isinstance(text, str):
        return None
    try:
        return _archs(text)
    except FarmError:
        return None


_FIX_CONFIG = ("the configuration moved between build and upload: rebuild the cell with today's config "
               "(bump build_epoch), or restore the config the wheel was built with")


def consistency(info: BuildInfo, derived: Derived | None) -> list[str]:
    """How a provenance contradicts itself: requested -> normalised -> expected per extension.

    ``derived`` tells which extensions have a list of their own (per the recipe); without it
    only the requested -> normalised link is checked."""
    arch_list = info.arch_list
    requested = _archs_or_none(arch_list.requested)
    normalised = _archs_or_none(arch_list.normalised)
    if requested is None or normalised is None:
        return [f"its arch list {clip(arch_list.to_dict())} does not parse"]
    out: list[str] = []
    if requested != normalised:
        out.append(f"requested {clip(arch_list.requested)} normalises to {';'.join(sorted(requested))}, "
                   f"not the recorded {clip(arch_list.normalised)}")
    if derived is not None:
        for so, text in sorted((info.expected or {}).items()):
            if derived.expected.for_extension(so)[1] is None and _archs_or_none(text) != normalised:
                out.append(f"{so} is expected to hold {clip(text)}, not the requested list (it has no list of its own)")
    return out


def bundled_against_config(recorded: Mapping[str, Bundled], derived: Derived) -> list[str]:
    """Each bundled library the provenance records, against today's recipe rules for it."""
    out = []
    for path, record in sorted(recorded.items()):
        rule = derived.expected.for_vendored(path)
        found = _archs_or_none(record.found)
        if rule is None:
            out.append(f"{path}: a bundled library the recipe does not declare")
        elif rule.archs is not None and found != frozenset(rule.archs.names()):
            out.append(f"{path}: the recipe expects {rule.archs.canonical() or '(host-only)'} of it, it holds "
                       f"{clip(record.found)}")
    return out


def config_difference(info: BuildInfo, derived: Derived) -> list[str]:
    """How today's configuration differs from what the wheel was built for (empty: it agrees)."""
    out: list[str] = []
    requested = _archs_or_none(info.arch_list.requested)
    if requested != frozenset(derived.requested.names()):
        out.append(f"the configuration resolves {derived.requested.canonical()} ({derived.origin}), the wheel was "
                   f"built for {clip(info.arch_list.requested)}")
    for so, text in sorted((info.expected or {}).items()):
        want = derived.expected.for_extension(so)[0]
        if _archs_or_none(text) != frozenset(want.names()):
            out.append(f"{so}: the configuration expects {want.canonical() or '(host-only)'}, recorded {clip(text)}")
    return out


def found_difference(recorded: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """Per extension, how the fresh inspection differs from the recorded ``found`` (empty: equal)."""
    out: list[str] = []
    for so in sorted(set(recorded) | set(now)):
        if so not in now:
            out.append(f"{so} is recorded but not in the wheel")
            continue
        if so not in recorded:
            out.append(f"{so} is in the wheel but not recorded")
            continue
        want, have = _archs(recorded[so]), _archs(now[so])
        if want != have:
            missing = ";".join(sorted(want - have)) or "-"
            extra = ";".join(sorted(have - want)) or "-"
            out.append(f"{so}: missing {missing}, extra {extra}")
    return out


def judge(
    filename: str,
    sha256: str,
    info: BuildInfo | None,
    entry: LedgerEntry | None,
    same_name_sha256: str | None,
    found_now: Mapping[str, str] | None,
    extensions_now: Mapping[str, str] | None = None,
    *,
    derived: Derived | None = None,
    config_checked: bool = False,
    disagreements: Iterable[str] = (),
    vendored_now: Mapping[str, str] | None = None,
) -> list[Refusal]:
    """Every reason to refuse one wheel, from facts already gathered.

    ``entry``: the ledger entry or fragment with this sha256 (None: none has it).
    ``same_name_sha256``: the sha256 the ledger (else a fragment) records for this file name, if any.
    ``found_now`` / ``extensions_now``: per extension, the targets and the sha256 the wheel holds now.
    ``config_checked``: the configuration was consulted; ``derived`` is what it resolves for the
    wheel's cell (None: it has no such cell). ``disagreements``: where the two readers differ.
    ``vendored_now``: per bundled library (``*.libs/``), the targets it holds now.
    """
    def refuse(check: Check, message: str, fix: str) -> Refusal:
        return Refusal(filename, check, message, fix)

    if info is None:
        return [refuse(Check.STAMPED, f"no .dist-info/{BUILD_INFO_NAME}: the wheel was never asserted",
                       _FIX_POSTBUILD)]
    out: list[Refusal] = []
    provenance = info.provenance
    result = info.assertion.result if info.assertion is not None else None
    if not info.asserted:
        out.append(refuse(Check.ASSERTED,
                          f"provenance is {provenance!r} and the assertion {result!r}; only asserted, "
                          "passed wheels are published",
                          "rebuild with `farm build` so the post-build assertion runs and passes"))
    else:
        # A passed assertion found exactly what was expected: a provenance that says otherwise
        # was not written by postbuild.
        unmet = found_difference(info.expected or {}, info.found or {})
        if unmet:
            out.append(refuse(Check.ASSERTED,
                              "its provenance says passed, but its recorded expected and found targets "
                              "differ: " + "; ".join(unmet), _FIX_REBUILD))
        contradictions = consistency(info, derived)
        if contradictions:
            out.append(refuse(Check.CONSISTENT, "its provenance contradicts itself: " + "; ".join(contradictions),
                              _FIX_REBUILD))
        if config_checked and derived is None:
            out.append(refuse(Check.CONFIG,
                              f"the configuration has no arch list for package {clip(info.package)!s} "
                              f"in cell {clip(info.cell.to_dict())}: its expected list cannot be re-derived",
                              "upload from the farm repository that built it (--root), with its recipe"))
        elif derived is not None:
            moved = config_difference(info, derived)
            if moved:
                out.append(refuse(Check.CONFIG, "; ".join(moved), _FIX_CONFIG))
            undeclared = bundled_against_config(info.bundled, derived)
            if undeclared:
                out.append(refuse(Check.CONFIG, "; ".join(undeclared),
                                  "declare the bundled library in the recipe's `vendored` map (its arch list, "
                                  "'none', or {exempt: REASON}) and rebuild, or keep it out of the wheel"))
    problems = name_problems(filename, info)
    if problems:
        out.append(refuse(Check.NAME, "file name does not match its provenance: " + "; ".join(problems),
                          "upload the file postbuild wrote, unrenamed; a wheel of another cell is never "
                          "relabelled by hand"))
    if entry is None:
        if same_name_sha256 is not None:
            out.append(refuse(Check.LEDGER,
                              f"the ledger records {filename} with sha256 {same_name_sha256}, this file "
                              f"has {sha256}: it changed after postbuild", _FIX_REBUILD))
        else:
            out.append(refuse(Check.LEDGER, f"no ledger entry or fragment has sha256 {sha256}",
                              "upload the fragment postbuild wrote beside the wheel "
                              f"(<wheel>{FRAGMENT_SUFFIX}), or run `farm postbuild` again"))
    else:
        if same_name_sha256 not in (None, sha256):
            # This build's fragment vouches for it, but the name is already taken in the ledger.
            out.append(refuse(Check.LEDGER,
                              f"the ledger already records {filename} with sha256 {same_name_sha256}; this "
                              f"file ({sha256}) is another build under the same name",
                              "a published name is never reused: bump build_epoch and rebuild"))
        if entry.filename != filename:
            out.append(refuse(Check.LEDGER,
                              f"sha256 {sha256} is recorded for {entry.filename!r}, not this name",
                              "upload the file under the name postbuild gave it"))
        # The entry is the embedded object plus the ledger's own keys: anything else that
        # differs means the two were not written by one postbuild.
        theirs, ours = entry.info.to_dict(), info.to_dict()
        differ = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)]
        if differ:
            out.append(refuse(Check.LEDGER,
                              f"the ledger entry and the embedded provenance differ in {', '.join(differ)} "
                              "(a wheel from another cell?)", _FIX_REBUILD))
    if found_now is not None:
        diff = found_difference(info.found or {}, found_now)
        if diff:
            out.append(refuse(Check.INSPECTION,
                              "re-inspection differs from the recorded targets: " + "; ".join(diff),
                              _FIX_REBUILD))
    if vendored_now is not None:
        from farm.provenance.audit import vendored_difference

        bundled = vendored_difference(info.bundled, vendored_now)
        if bundled:
            out.append(refuse(Check.INSPECTION, "bundled libraries: " + "; ".join(bundled), _FIX_REBUILD))
    disagreements = list(disagreements)
    if disagreements:
        out.append(refuse(Check.INSPECTION, "the native reader and cuobjdump disagree: " + "; ".join(disagreements),
                          "the fatbin headers do not describe the device code they hold (a damaged or forged "
                          "binary): " + _FIX_REBUILD))
    if extensions_now is not None:
        # Same targets but other code (an extension swapped after postbuild) shows here.
        recorded = info.extensions or {}
        swapped = sorted(so for so in set(recorded) & set(extensions_now) if recorded[so] != extensions_now[so])
        if swapped:
            out.append(refuse(Check.INSPECTION,
                              "extension(s) differ from the sha256 recorded at postbuild: " + ", ".join(swapped),
                              _FIX_REBUILD))
    return out


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vouchers:
    """Where the gate looks for a wheel's ledger entry: the committed ledger and new fragments."""

    ledger: LedgerIndex
    fragments: Mapping[str, LedgerEntry]  # sha256 -> entry

    @classmethod
    def load(cls, ledger_path: Path | None, fragment_dirs: Iterable[Path]) -> Vouchers:
        exists = ledger_path is not None and ledger_path.exists()
        index = LedgerIndex.load(ledger_path) if exists else LedgerIndex.empty()  # type: ignore[arg-type]
        fragments: dict[str, LedgerEntry] = {}
        for directory in fragment_dirs:
            if directory.is_dir():
                for frag in sorted(directory.glob(f"*{FRAGMENT_SUFFIX}")):
                    entry, rec = read_fragment(frag)
                    fragments.setdefault(rec.sha256, entry)
        return cls(index, fragments)

    def by_sha256(self, sha256: str) -> tuple[LedgerEntry | None, str]:
        """The entry with this sha256 and where it came from: the ledger first (it holds what
        was already published), else a fragment of this batch."""
        rec = self.ledger.by_sha256(sha256)
        if rec is not None:
            return self.ledger.ledger_entry(rec), "ledger"
        if sha256 in self.fragments:
            return self.fragments[sha256], "fragment"
        return None, ""

    def sha256_of_name(self, filename: str) -> str | None:
        """The sha256 the ledger (else a fragment) records for ``filename``."""
        rec = self.ledger.by_filename(filename)
        if rec is not None:
            return rec.sha256
        return next((e.sha256 for e in self.fragments.values() if e.filename == filename), None)


def gate_readers(reader: str = "auto") -> tuple[str, Path | None, str]:
    """The re-inspection's reader: ``both`` when cuobjdump is available (``auto``), else the native
    one; returns (reader, cuobjdump path, description)."""
    from farm.binary.cuobjdump import cuobjdump_version, find_cuobjdump
    from farm.errors import ToolError

    if reader == "native":
        return "native", None, "native"
    try:
        tool = find_cuobjdump()
        version = cuobjdump_version(tool)
    except ToolError:
        if reader == "both":
            raise
        return "native", None, "native (no cuobjdump found)"
    return "both", tool, f"native + cuobjdump {version}"


def run_gate(wheels: Iterable[Path], vouchers: Vouchers, *, derive: Derive | None = None,
             reader: str = "auto") -> GateResult:
    """Check every wheel; nothing is sent by the caller unless ``result.ok``.

    ``derive``: today's expectation for a provenance's cell (:func:`farm.provenance.audit.derive_from_config`);
    the command always passes it. ``reader``: ``auto`` (both readers when cuobjdump is found),
    ``both`` or ``native``."""
    from farm.provenance.audit import (
        wheel_facts,  # one reading of a wheel for the gate and the audit
    )

    reader, tool, readers = gate_readers(reader)
    passed: list[GatedWheel] = []
    refused: list[Refusal] = []
    for path in sorted(Path(p) for p in wheels):
        name = path.name
        # The bytes' sha256, the readers' targets and each extension's sha256 now, and the
        # embedded provenance (schema-checked, so a hostile file cannot crash the judge).
        facts = wheel_facts(path, reader=reader, cuobjdump=tool)
        if facts.problem:
            refused.append(Refusal(name, Check.READABLE, f"cannot read the wheel: {_first_line(facts.problem)}",
                                   _FIX_REBUILD))
            continue
        entry, source = vouchers.by_sha256(facts.sha256)
        derived = derive(facts.embedded) if derive is not None and facts.embedded is not None else None
        problems = judge(name, facts.sha256, facts.embedded, entry, vouchers.sha256_of_name(name), facts.found,
                         facts.extensions, derived=derived, config_checked=derive is not None,
                         disagreements=facts.disagreements, vendored_now=facts.vendored)
        if problems:
            refused.extend(problems)
        else:
            assert entry is not None and facts.embedded is not None
            passed.append(GatedWheel(path, name, facts.sha256, facts.size, facts.embedded, entry, source))
    return GateResult(tuple(passed), tuple(refused), readers, derive is not None)


def _first_line(text: str) -> str:
    """A refusal is one line (its fix comes after it)."""
    return text.splitlines()[0]
