"""The one judge of a wheel: its bytes, binaries and provenance against what a caller holds it to.

The upload gate and ``farm audit`` check the same things, so they call the same :func:`judge` with
their own :class:`Expectation`: the gate (:data:`GATE`) wants the provenance embedded, asserted and
passed, and a ledger entry or fragment that vouches for these exact bytes under this name; the
audit (:data:`AUDIT`) takes the ledger's provenance when the wheel has none, judges an inferred
one on what it records, and reports a moved configuration rather than refusing it.

Each finding names the :class:`Check` it fails, one line for a refusal (``message``, with its
``fix``) and one reason per subject (``reasons``: an extension, a bundled library, a field), which
the audit lists. Pure: the facts come in gathered (:mod:`farm.provenance.wheelfacts`), today's
configuration as a :class:`Derived` or a per-extension map (:func:`derive_from_config`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from farm.binary.archrule import NONE, Expected, difference, fits, vendored_rules
from farm.binary.madeby import MadeBy
from farm.errors import FarmError, clip
from farm.model.arch import ArchList
from farm.model.archrequest import arch_request
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.provenance import buildinfo
from farm.provenance.buildinfo import BUILD_INFO_NAME, BuildInfo, LedgerEntry, Recorded, name_problems
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from farm.provenance.wheelfacts import WheelFacts


class Check(str, enum.Enum):
    """What a wheel is checked for (``--json``'s ``check`` of a refusal)."""

    READABLE = "readable"  # the wheel, a binary or the provenance cannot be read
    STAMPED = "stamped"  # no provenance at all
    ASSERTED = "asserted"  # the provenance is not an asserted, passed one (or contradicts its pass)
    NAME = "name"  # the file name is not the cell's
    CONSISTENT = "consistent"  # requested -> normalised -> expected do not follow
    CONFIG = "config"  # today's configuration resolves another list
    LEDGER = "ledger"  # the ledger does not vouch for these bytes under this name
    INSPECTION = "inspection"  # the binaries differ from what the provenance records


@dataclass(frozen=True)
class WheelFinding:
    check: Check
    message: str  # one line: what is wrong
    fix: str
    reasons: tuple[str, ...]  # the same, one line per subject


@dataclass(frozen=True)
class Derived:
    """What the configuration resolves today for a provenance's cell."""

    requested: ArchList  # the cell's list (recipe override or policy row)
    origin: str  # the rule it came from, e.g. "policy x86_64 13.0"
    expected: Expected  # per extension, with the recipe's per-extension lists and vendored rules

    def today(self, paths: Iterable[str]) -> dict[str, ArchList]:
        """Today's list for each extension path."""
        return {p: self.expected.for_extension(p)[0] for p in paths}


@dataclass(frozen=True)
class Expectation:
    """What a caller holds a wheel to."""

    embedded: bool  # the provenance must be in the wheel (else the ledger's entry serves)
    asserted: bool  # only an asserted, passed provenance will do (else an inferred one is judged too)
    vouched: bool  # a ledger entry or fragment must hold these bytes, under this name, with this provenance
    derived: Derived | None = None  # today's configuration for the wheel's cell
    today: Mapping[str, ArchList] | None = None  # today's list per extension (from ``derived`` when None)
    config_required: bool = False  # the configuration was consulted: a cell it does not know is a finding


GATE = Expectation(embedded=True, asserted=True, vouched=True)
AUDIT = Expectation(embedded=False, asserted=False, vouched=False)

FIX_POSTBUILD = "run `farm postbuild WHEEL --out DIR` on the built wheel and upload its output"
FIX_REBUILD = "rebuild the cell (`farm build`); a wheel changed after postbuild is never uploaded"
FIX_CONFIG = ("the configuration moved between build and upload: rebuild the cell with today's config "
              "(bump build_epoch), or restore the config the wheel was built with")
_FIX_NAME = ("upload the file postbuild wrote, unrenamed; a wheel of another cell is never relabelled by hand")
_FIX_BUNDLED = ("declare the bundled library in the recipe's `vendored` map (its arch list, 'none', or "
                "{exempt: REASON}) and rebuild, or keep it out of the wheel")
_FIX_READERS = ("the fatbin headers do not describe the device code they hold (a damaged or forged binary): "
                + FIX_REBUILD)


# -- target sets: the arch rule (farm.binary.archrule) on the recorded lists, decoded once --------
def _targets(value: Recorded) -> ArchList:
    return value if isinstance(value, ArchList) else NONE


def _sorted(archs: ArchList) -> str:
    return ";".join(sorted(archs.names())) or "-"


def _apart(recorded: Mapping[str, object], now: Mapping[str, object], *, gone: Callable[[str], str],
           new: Callable[[str], str], moved: Callable[[str], str]) -> list[str]:
    """One reason per key on which the two maps differ, in key order: held as recorded only
    (``gone``), only now (``new``), or with other values (``moved``)."""
    out = []
    for k in sorted(set(recorded) | set(now)):
        if k not in now:
            out.append(gone(k))
        elif k not in recorded:
            out.append(new(k))
        elif recorded[k] != now[k]:
            out.append(moved(k))
    return out


def found_difference(recorded: Mapping[str, Recorded], now: Mapping[str, Recorded]) -> list[str]:
    """Per extension, how the targets held now differ from the recorded ones (empty: equal)."""

    def moved(so: str) -> str:
        differs = difference(_targets(recorded[so]), _targets(now[so]))
        return f"{so}: missing {_sorted(differs.missing)}, extra {_sorted(differs.extra)}"

    return _apart(recorded, now, gone=lambda so: f"{so} is recorded but not in the wheel",
                  new=lambda so: f"{so} is in the wheel but not recorded", moved=moved)


def _held_difference(texts: Mapping[str, str], recorded: Mapping[str, Recorded], now: Mapping[str, ArchList], *,
                     where: str, says: str) -> list[str]:
    """The same comparison, one reason per extension naming both lists (``texts``: the recorded
    ones as written)."""
    return _apart(recorded, now, gone=lambda so: f"{so}: in {where} but not in the wheel",
                  new=lambda so: f"{so}: in the wheel but not in {where}",
                  moved=lambda so: f"{so}: {says} {texts[so] or '(none)'}, the binary holds "
                                   f"{now[so].canonical() or '(none)'}")


def vendored_difference(info: BuildInfo, now: Mapping[str, ArchList]) -> list[str]:
    """How the bundled libraries (``*.libs/``) differ from what a provenance records for them."""
    return _apart(info.archs.bundled, now,
                  gone=lambda path: f"{path}: recorded as a bundled library but not in the wheel",
                  new=lambda path: f"{path}: a bundled library (found {now[path].canonical() or 'no device code'}) "
                                   "that its provenance does not record: never asserted",
                  moved=lambda path: f"{path}: recorded as holding {info.bundled[path].found or '(none)'}, the "
                                     f"bundled library holds {now[path].canonical() or '(none)'}")


def family_targets(info: BuildInfo) -> tuple[dict[str, ArchList], list[str]]:
    """Per extension, the union of the targets of the kernel families recorded as holding TUs in
    it, and what in the families' record does not parse or names no recorded extension."""
    families = info.families if isinstance(info.families, Mapping) else {}
    held: dict[str, ArchList] = {}
    wrong: list[str] = []
    for name, record in sorted(families.items()):
        targets = info.archs.families[name]
        if not isinstance(targets, ArchList):
            wrong.append(f"kernel family {clip(name)}: its targets {clip(record.targets)} do not parse")
            continue
        for so in record.extensions:
            if so not in (info.expected or {}):
                wrong.append(f"kernel family {clip(name)}: {clip(so)} is not an extension it records")
            held[so] = held.get(so, NONE) | targets
    return held, wrong


def _fits(recorded: Recorded, own: Recorded, families: ArchList | None) -> bool:
    return isinstance(recorded, ArchList) and isinstance(own, ArchList) and fits(recorded, own, families)


def consistency(info: BuildInfo, derived: Derived | None) -> list[str]:
    """How a provenance contradicts itself: requested -> normalised -> expected per extension.

    ``derived`` tells which extensions have a list of their own (per the recipe); without it
    only the requested -> normalised link is checked."""
    arch_list, archs = info.arch_list, info.archs
    requested, normalised = archs.requested, archs.normalised
    if not isinstance(requested, ArchList) or not isinstance(normalised, ArchList):
        return [f"its arch list {clip(arch_list.to_dict())} does not parse"]
    out: list[str] = []
    if requested != normalised:
        out.append(f"requested {clip(arch_list.requested)} normalises to {';'.join(sorted(requested.names()))}, "
                   f"not the recorded {clip(arch_list.normalised)}")
    made, line = info.made_by, info.cell.cuda
    if isinstance(made, Mapping) and line is not None:
        out += [f"{so}: {wrong}" for so, record in sorted(made.items())
                if (wrong := MadeBy(record.cubin, record.ptx_isa, record.unread).against(line))]
    held, unread = family_targets(info)
    out += unread
    if derived is not None:
        for so, text in sorted((info.expected or {}).items()):
            if derived.expected.for_extension(so)[1] is None and not _fits(archs.expected[so], normalised,
                                                                           held.get(so)):
                out.append(f"{so} is expected to hold {clip(text)}, not the requested list (it has no list of its own)"
                           + (" with its kernel families' targets" if so in held else ""))
    return out


def bundled_against_config(info: BuildInfo, derived: Derived) -> list[str]:
    """Each bundled library the provenance records, against today's recipe rules for it."""
    out = []
    for path, record in sorted(info.bundled.items()):
        rule = derived.expected.for_vendored(path)
        if rule is None:
            out.append(f"{path}: a bundled library the recipe does not declare")
        elif rule.archs is not None and info.archs.bundled[path] != rule.archs:
            out.append(f"{path}: the recipe expects {rule.archs.canonical() or '(host-only)'} of it, it holds "
                       f"{clip(record.found)}")
    return out


def config_difference(info: BuildInfo, derived: Derived | None, today: Mapping[str, ArchList]) -> list[str]:
    """How today's configuration differs from what the wheel was built for (empty: it agrees)."""
    out: list[str] = []
    if derived is not None and info.archs.requested != derived.requested:
        out.append(f"the configuration resolves {derived.requested.canonical()} ({derived.origin}), the wheel was "
                   f"built for {clip(info.arch_list.requested)}")
    built, texts = info.archs.expected, info.expected or {}
    held, _ = family_targets(info)  # an extension with kernel families: today's list for its other TUs
    out += [f"{so}: built for {clip(texts.get(so) or '(none)')}, today's policy resolves "
            f"{today[so].canonical() or '(none)'}" + (" (besides its kernel families' targets)" if so in held else "")
            for so in sorted(today) if not (_fits(built.get(so), today[so], held[so]) if so in held
                                            else built.get(so) == today[so])]
    return out


# -- the judge ------------------------------------------------------------------------------------
def judge(facts: WheelFacts, entry: LedgerEntry | None, same_name_sha256: str | None,
          expect: Expectation) -> list[WheelFinding]:
    """Every rule ``facts`` breaks under ``expect`` (empty: none).

    ``entry``: the ledger entry or fragment with the wheel's sha256 (None: none has it);
    ``same_name_sha256``: the sha256 the ledger (else a fragment) records for its file name."""
    name, sha256 = facts.filename, facts.sha256
    out: list[WheelFinding] = []

    def find(check: Check, message: str, fix: str, reasons: Iterable[str] | None = None) -> None:
        out.append(WheelFinding(check, message, fix, tuple(reasons) if reasons is not None else (message,)))

    def find_each(check: Check, lead: str, fix: str, reasons: list[str]) -> None:  # none: no finding
        if reasons:
            find(check, lead + "; ".join(reasons), fix, reasons)

    if facts.problem:
        find(Check.READABLE, f"cannot read the wheel: {facts.problem.splitlines()[0]}", FIX_REBUILD, [facts.problem])
        return out
    renamed = same_name_sha256 is not None and same_name_sha256 != sha256
    if renamed:
        reason = f"the ledger records sha256 {same_name_sha256} for {name}; this file is {sha256}"
        if entry is None:
            find(Check.LEDGER, f"the ledger records {name} with sha256 {same_name_sha256}, this file has {sha256}: "
                               "it changed after postbuild", FIX_REBUILD, [reason])
        else:  # this build's fragment vouches for it, but the name is already taken in the ledger
            find(Check.LEDGER, f"the ledger already records {name} with sha256 {same_name_sha256}; this file "
                               f"({sha256}) is another build under the same name",
                 "a published name is never reused: bump build_epoch and rebuild", [reason])
    info = facts.embedded
    if info is None and not expect.embedded and entry is not None:
        info = entry.info
    if info is None:
        if not renamed:
            find(Check.STAMPED, f"no .dist-info/{BUILD_INFO_NAME}: the wheel was never asserted", FIX_POSTBUILD,
                 [f"no embedded {BUILD_INFO_NAME} and no ledger entry" if not expect.embedded
                  else f"no embedded {BUILD_INFO_NAME}"])
        return out

    asserted = info.provenance == buildinfo.ASSERTED
    result = info.assertion.result if info.assertion is not None else None
    held_to_assertion = asserted or expect.asserted
    if (asserted and result != "passed") or (not asserted and expect.asserted):
        find(Check.ASSERTED, f"provenance is {info.provenance!r} and the assertion {result!r}; only asserted, "
                             "passed wheels are published",
             "rebuild with `farm build` so the post-build assertion runs and passes",
             [f"its provenance says the assertion {result or 'never ran'}" if asserted
              else f"its provenance is {info.provenance}, not asserted at build time"])
    elif asserted:
        # A passed assertion found exactly what was expected: a provenance that says otherwise
        # was not written by postbuild.
        unmet = found_difference(info.archs.expected, info.archs.found)
        if unmet:
            find(Check.ASSERTED, "its provenance says passed, but its recorded expected and found targets differ: "
                 + "; ".join(unmet), FIX_REBUILD, [f"recorded expected and found differ: {u}" for u in unmet])
        find_each(Check.CONSISTENT, "its provenance contradicts itself: ", FIX_REBUILD,
                  consistency(info, expect.derived))
        if expect.config_required and expect.derived is None:
            find(Check.CONFIG, f"the configuration has no arch list for package {clip(info.package)!s} in cell "
                               f"{clip(info.cell.to_dict())}: its expected list cannot be re-derived",
                 "upload from the farm repository that built it (--root), with its recipe")
        today = expect.today
        if today is None and expect.derived is not None:
            today = expect.derived.today((info.expected or {}).keys())
        if today is not None:
            find_each(Check.CONFIG, "", FIX_CONFIG, config_difference(info, expect.derived, today))
        if expect.derived is not None:
            find_each(Check.CONFIG, "", _FIX_BUNDLED, bundled_against_config(info, expect.derived))
    if held_to_assertion:
        problems = name_problems(name, info)
        if problems:
            find(Check.NAME, "file name does not match its provenance: " + "; ".join(problems), _FIX_NAME,
                 [f"file name: {p}" for p in problems])
    if expect.vouched:
        _vouching(find, facts, info, entry, renamed)
    if entry is not None and facts.embedded is not None:
        theirs = _held_difference(entry.info.found or {}, entry.info.archs.found, facts.found, where="the ledger",
                                  says="the ledger records")
        if theirs and not expect.vouched:  # the gate's check of the whole entry covers it
            find(Check.LEDGER, "the ledger's entry records other targets: " + "; ".join(theirs), FIX_REBUILD, theirs)
    # what the binaries hold now, against what the provenance records
    texts, recorded = (info.found, info.archs.found) if info.found is not None else (info.expected or {},
                                                                                   info.archs.expected)
    if recorded != dict(facts.found):
        find(Check.INSPECTION, "re-inspection differs from the recorded targets: "
             + "; ".join(found_difference(recorded, facts.found)), FIX_REBUILD,
             _held_difference(texts, recorded, facts.found, where="its provenance",
                              says="recorded as holding" if info.found is not None else "built to hold"))
    if held_to_assertion:
        find_each(Check.INSPECTION, "bundled libraries: ", FIX_REBUILD, vendored_difference(info, facts.vendored))
    if facts.made_by is not None:
        _toolkit(find, facts.made_by, info)
    if facts.disagreements:
        find(Check.INSPECTION, "the native reader and cuobjdump disagree: " + "; ".join(facts.disagreements),
             _FIX_READERS, [f"the native reader and cuobjdump disagree on {d}" for d in facts.disagreements])
    # same targets but other code (an extension swapped after postbuild) shows here
    hashes = info.extensions or {}
    swapped = sorted(so for so in set(hashes) & set(facts.extensions) if hashes[so] != facts.extensions[so])
    if swapped:
        find(Check.INSPECTION, "extension(s) differ from the sha256 recorded at postbuild: " + ", ".join(swapped),
             FIX_REBUILD, [f"{so}: recorded with sha256 {hashes[so]}, the file's is {facts.extensions[so]}"
                           for so in swapped])
    return out


def _toolkit(find: Callable[..., None], now: Mapping[str, MadeBy], info: BuildInfo) -> None:
    """The toolkit the device code records now: what postbuild recorded, and the cell's CUDA line
    (a wheel CUDA 13.0 built, labelled and described as cu128, never enters the cu128 channel)."""
    recorded = info.made_by
    if isinstance(recorded, Mapping):
        moved = sorted(so for so in set(recorded) | set(now)
                       if (recorded[so].to_dict() if so in recorded else None)
                       != (now[so].to_json() if so in now else None))
        if moved:
            find(Check.INSPECTION, "the toolkit records of the device code differ from those recorded at postbuild: "
                 + ", ".join(moved), FIX_REBUILD)
    line = info.cell.cuda
    if line is not None:
        other = [f"{so}: {wrong}" for so, made in sorted(now.items()) if (wrong := made.against(line))]
        if other:
            find(Check.INSPECTION, "the device code was not made by the cell's CUDA toolkit: " + "; ".join(other),
                 f"build the wheel with the CUDA {line} toolkit (`farm build ... --cuda {line}`); a wheel is never "
                 "relabelled for another CUDA line", other)


def _vouching(find: Callable[..., None], facts: WheelFacts, info: BuildInfo, entry: LedgerEntry | None,
              renamed: bool) -> None:
    """The gate's ledger rule: an entry or fragment holds these bytes, under this name, with the
    provenance the wheel embeds."""
    if entry is None:
        if not renamed:
            find(Check.LEDGER, f"no ledger entry or fragment has sha256 {facts.sha256}",
                 f"upload the fragment postbuild wrote beside the wheel (<wheel>{FRAGMENT_SUFFIX}), or run "
                 "`farm postbuild` again")
        return
    if entry.filename != facts.filename:
        find(Check.LEDGER, f"sha256 {facts.sha256} is recorded for {entry.filename!r}, not this name",
             "upload the file under the name postbuild gave it")
    # The entry is the embedded object plus the ledger's own keys and the record of the build that
    # made it (which a wheel does not embed): anything else that differs means the two were not
    # written by one postbuild.
    theirs, ours = entry.info.for_wheel().to_dict(), info.for_wheel().to_dict()
    differ = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)]
    if differ:
        find(Check.LEDGER, f"the ledger entry and the embedded provenance differ in {', '.join(differ)} "
                           "(a wheel from another cell?)", FIX_REBUILD)


# -- today's configuration ------------------------------------------------------------------------
# a provenance -> what today's config resolves for its cell, or None when it has no such cell
Derive = Callable[[BuildInfo], "Derived | None"]


def derive_from_config(config: FarmConfig) -> Derive:
    """The one place that re-derives a wheel's expectation from the configuration.

    Deliberately not the wheel's own build spec: the gate and audit ask whether a built wheel
    still matches what today's config says (a trust check), so they resolve the cell again,
    through the same resolver the build used (:func:`farm.model.archrequest.arch_request`)."""

    def derive(provenance: BuildInfo) -> Derived | None:
        package, cell = provenance.package, provenance.cell
        if package is None or package not in config.recipes or cell.cuda is None or cell.torch is None \
                or cell.python is None or cell.platform is None:
            return None
        recipe = config.recipes[package]
        try:
            request = arch_request(config, recipe, Cell(package, provenance.version, cell.cuda,
                                                        cell.torch, cell.python, cell.platform))
        except (FarmError, KeyError):
            return None
        if request is None:
            return None
        return Derived(request.archs, request.origin,
                       Expected(request.archs, per_extension=request.extensions, vendored=vendored_rules(recipe)))

    return derive
