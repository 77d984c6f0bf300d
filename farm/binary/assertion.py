"""The post-build assertion: every extension's device code equals what was asked for.

Per extension ``.so``: the found set (union over its runnable fatbins) must equal the expected set,
the two readers must agree (SASS compared without ``f``), every translation unit's fatbin must hold
what its siblings hold, and a CUDA package's extension must hold device code at all. Each failure
carries the layer that probably caused it, so the maintainer knows where to look.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from farm.binary.archrule import NONE, Expected, FamilyTargets, VendoredRule, difference, expected_list, unit_owners
from farm.binary.fatbin import Fatbin, runnable, union
from farm.binary.fatbinscan import RELOCATABLE_SECTION
from farm.binary.inspection import Reader, SoInspection, Tools, inspect_wheel
from farm.model.arch import ArchList, Target
from farm.table import format_table


class Cause(str, enum.Enum):
    """The layer that probably added or dropped a target."""

    DEVICE_LINK_STUB = "nvcc device-link stub"
    NVCC_DEFAULT = "nvcc default arch"
    BUILD_OVERRIDE = "setup.py/CMake override"
    RECIPE_OVERRIDE = "recipe override"
    TU_FLAGS = "translation unit built with other flags"
    RDC_LINK = "-rdc device link"
    NO_CUDA = "built without CUDA"
    READERS = "readers disagree"
    NO_EXTENSIONS = "no extension built"
    TOOLKIT = "built by another CUDA toolkit"
    FAMILY = "kernel family built for other targets"
    NO_SYMBOLS = "translation units cannot be told apart"


_EXPLAIN: dict[Cause, str] = {
    Cause.DEVICE_LINK_STUB: (
        "the .so was linked by nvcc, whose device link adds a fatbin of empty cubins for the link "
        "step's arches; link with the host compiler (as torch does) or give the link the same -gencode flags"
    ),
    Cause.NVCC_DEFAULT: (
        "a compile or link step got no -gencode/-arch, so nvcc used its default (sm_75 + compute_75)"
    ),
    Cause.BUILD_OVERRIDE: (
        "the build used its own arch list: setup.py/CMake assigns TORCH_CUDA_ARCH_LIST or "
        "CMAKE_CUDA_ARCHITECTURES, passes -gencode, or has an nvcc flag containing 'arch' "
        "(which makes torch ignore TORCH_CUDA_ARCH_LIST); run `farm lint` on the source"
    ),
    Cause.RECIPE_OVERRIDE: (
        "the recipe's own list for this extension differs from what was built; check the recipe's "
        "per-extension map and arch overrides"
    ),
    Cause.TU_FLAGS: (
        "one translation unit was compiled with other arch flags (per-file flags, a separate "
        "CMake target); it fails or runs another image on the GPUs it lacks"
    ),
    Cause.RDC_LINK: (
        "-rdc code runs the device-linked fatbin, and the device link keeps only SASS of the link "
        "arches (PTX stays in __nv_relfatbin, never loaded); add SASS for those arches or drop -rdc"
    ),
    Cause.NO_CUDA: (
        "the extension was built without CUDA (FORCE_CUDA unset, nvcc or CUDA_HOME not found at build "
        "time, or a CPU fallback in setup.py)"
    ),
    Cause.READERS: "cuobjdump and the native reader list different entries: the file is suspect",
    Cause.TOOLKIT: (
        "the toolkit version the compiler wrote into the device code (each cubin's .note.nv.cuinfo, each "
        "PTX entry's ISA) is not the cell's CUDA line: the build used another toolkit than the cell's "
        "(CUDA_HOME, PATH) or the wheel is labelled for another line; build it with the cell's toolkit"
    ),
    Cause.FAMILY: (
        "a kernel family's translation unit holds other targets than the family's own (its archs "
        "intersected with the cell's list): the build's per-source gencode flags (CMake "
        "set_gencode_flags_for_srcs, the family's arch variable) or the recipe's kernel_families differ; "
        "run `farm lint` on the source to see each family's targets"
    ),
    Cause.NO_SYMBOLS: (
        "kernel families are judged per translation unit, found through each TU's source name in the "
        ".so's symbol table (nvcc's host object and its fatbinData); the .so was stripped or two families "
        "share a source file name: do not strip extensions, give the sources distinct names"
    ),
    Cause.NO_EXTENSIONS: (
        "the wheel has no extension module: the build fell back to pure Python; if the package "
        "is JIT-only or pure, say so in its recipe"
    ),
}


@dataclass(frozen=True)
class AssertionFinding:
    code: str  # missing | extra | no-device-code | incomplete-tu | readers-disagree | no-extensions
    message: str
    cause: Cause
    targets: tuple[Target, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "cause": self.cause.value,
                "explanation": _EXPLAIN[self.cause], "targets": [t.name for t in self.targets]}


@dataclass(frozen=True)
class ExtensionResult:
    path: str
    expected: ArchList
    expected_from: str | None  # the per-extension glob, or None for the default list
    found: ArchList
    findings: tuple[AssertionFinding, ...]
    inspection: SoInspection
    families: tuple[str, ...] = ()  # the kernel families with a translation unit in it

    @property
    def missing(self) -> ArchList:
        return self.expected - self.found

    @property
    def extra(self) -> ArchList:
        return self.found - self.expected

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def causes(self) -> tuple[Cause, ...]:
        return tuple(dict.fromkeys(f.cause for f in self.findings))

    def cause_of(self, target: Target) -> Cause | None:
        codes = ("missing", "extra", "no-device-code", "family-targets")
        return next((f.cause for f in self.findings if target in f.targets and f.code in codes), None)

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "passed": self.passed,
            "expected": self.expected.canonical(),
            "expected_from": self.expected_from,
            "found": self.found.canonical(),
            "missing": self.missing.canonical(),
            "extra": self.extra.canonical(),
            "likely_causes": [c.value for c in self.causes],
            "findings": [f.to_json() for f in self.findings],
            "fatbins": len(self.inspection.fatbins),
            "made_by": None if self.inspection.made_by is None else self.inspection.made_by.to_json(),
            "families": list(self.families),
        }


@dataclass(frozen=True)
class VendoredResult:
    """One bundled library (``*.libs/``) against the recipe's rule for it."""

    path: str
    found: ArchList
    rule: VendoredRule | None  # None: the recipe does not declare it
    disagreement: str | None = None  # the two readers differ

    @property
    def passed(self) -> bool:
        return self.problem is None

    @property
    def problem(self) -> str | None:
        if self.disagreement:
            return f"the native reader and cuobjdump disagree on it: {self.disagreement}"
        if self.rule is None:
            return (f"the wheel bundles it (found: {self.found.canonical() or 'no device code'}) but the recipe "
                    "does not declare it")
        if self.rule.archs is not None and (differs := difference(self.rule.archs, self.found)):
            return (f"expected {self.rule.archs.canonical() or '(host-only)'} (recipe vendored[{self.rule.glob!r}]), "
                    f"found {self.found.canonical() or '(none)'}: missing {differs.missing.canonical() or '-'}, "
                    f"extra {differs.extra.canonical() or '-'}")
        return None

    def record(self) -> dict[str, object]:
        """Its entry in ``_build_info.json``'s ``vendored``."""
        assert self.rule is not None
        return {"found": self.found.canonical(),
                "expected": self.rule.archs.canonical() if self.rule.archs is not None else None,
                "exempt": self.rule.exempt}

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "found": self.found.canonical(), "passed": self.passed,
                "rule": self.rule.to_json() if self.rule else None, "problem": self.problem}


_FIX_VENDORED = ("declare every bundled library in the recipe's `vendored` map (its own arch list, 'none' for "
                 "host-only, or {exempt: REASON}), or keep it out of the wheel (link statically, or depend on the "
                 "wheel that ships it)")


@dataclass(frozen=True)
class AssertionReport:
    wheel: str
    expected: Expected
    extensions: tuple[ExtensionResult, ...]
    findings: tuple[AssertionFinding, ...] = ()  # wheel-level (no extension at all)
    tools: Tools = field(default_factory=Tools)
    vendored_results: tuple[VendoredResult, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.findings and all(e.passed for e in self.extensions) and all(
            v.passed for v in self.vendored_results)

    def families_record(self, member: Callable[[str], str] = str) -> dict[str, dict[str, object]]:
        """Each kernel family's entry in ``_build_info.json``: its targets, sources and the
        extensions (their path as ``member`` gives it) holding its TUs."""
        return {f.name: {"targets": f.targets.canonical(), "sources": list(f.sources),
                         "extensions": [member(e.path) for e in self.extensions if f.name in e.families],
                         # only where it has globs: a record without them reads as before
                         **({"patterns": list(f.patterns)} if f.patterns else {})}
                for f in self.expected.families}

    def to_json(self) -> dict[str, object]:
        return {
            "wheel": self.wheel,
            "passed": self.passed,
            "result": "passed" if self.passed else "failed",
            "expected": self.expected.to_json(),
            "extensions": [e.to_json() for e in self.extensions],
            "findings": [f.to_json() for f in self.findings],
            "vendored": [v.to_json() for v in self.vendored_results],
            "tools": self.tools.to_json(),
        }

    def render(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        tools = f"native reader {self.tools.native}, cuobjdump {self.tools.cuobjdump}"
        lines = [f"{self.wheel}: {verdict} ({tools})"]
        for f in self.findings:
            lines += [f"  problem: {f.message}", f"    probable cause: {f.cause.value}: {_EXPLAIN[f.cause]}"]
        for ext in self.extensions:
            source = f"recipe glob {ext.expected_from!r}" if ext.expected_from else self.expected.default_from
            lines += ["", f"{ext.path}: {'ok' if ext.passed else 'FAILED'} (expected from {source})"]
            lines.append(format_table(
                ("", "targets"),
                [("expected", ext.expected.canonical() or "(none)"), ("found", ext.found.canonical() or "(none)"),
                 ("missing", ext.missing.canonical() or "-"), ("extra", ext.extra.canonical() or "-")],
            ))
            if ext.missing or ext.extra:
                rows = [(t.name, "missing" if t in ext.missing.targets else "extra",
                         (c.value if (c := ext.cause_of(t)) else "")) for t in ArchList.of(
                            ext.missing.targets | ext.extra.targets)]
                lines.append(format_table(("target", "status", "probable cause"), rows))
            lines += [f"  problem: {f.message}" for f in ext.findings]
            lines += [f"  {cause.value}: {_EXPLAIN[cause]}" for cause in ext.causes]
        for v in self.vendored_results:
            how = ("not declared" if v.rule is None else f"exempt: {v.rule.exempt}" if v.rule.archs is None
                   else f"expected {v.rule.archs.canonical() or '(host-only)'}")
            lines += ["", (f"{v.path} (bundled library): {'ok' if v.passed else 'FAILED'} "
                           f"(found {v.found.canonical() or 'no device code'}; {how})")]
            if v.problem:
                lines += [f"  problem: {v.problem}", f"  fix: {_FIX_VENDORED}"]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the pure core: one extension's inspection against its expected list
# --------------------------------------------------------------------------------------------
def _names(targets: set[Target] | frozenset[Target]) -> str:
    return ArchList.of(targets).canonical()


def _is_nvcc_default(t: Target) -> bool:
    return t.number == 75 and t.variant.value == ""


_NVCC_DEFAULT_PAIR = frozenset(ArchList.parse("sm_75;compute_75").targets)


def judge(inspection: SoInspection, expected: ArchList, *, expected_from: str | None = None,
          cuda_package: bool = True, cuda: str | None = None) -> ExtensionResult:
    """Findings for one extension (pure: works on an inspection, reads nothing). ``cuda``: the
    cell's CUDA line, which the toolkit the device code records must be."""
    found = inspection.found
    findings: list[AssertionFinding] = []
    name = inspection.path
    if inspection.disagreement:
        findings.append(AssertionFinding("readers-disagree", f"{name}: {inspection.disagreement}", Cause.READERS))
    if cuda is not None and inspection.has_device_code:
        made_by = inspection.made_by
        wrong = ("its toolkit records were not read" if made_by is None else made_by.against(cuda))
        if wrong:
            findings.append(AssertionFinding("toolkit-mismatch", f"{name}: {wrong}", Cause.TOOLKIT))
    if not inspection.has_device_code:
        if expected and cuda_package:
            findings.append(AssertionFinding(
                "no-device-code",
                f"{name} has no device code at all, expected {expected.canonical()}",
                Cause.NO_CUDA, tuple(expected),
            ))
        return ExtensionResult(name, expected, expected_from, found, tuple(findings), inspection)

    runnable = inspection.runnable
    stubs = [f for f in runnable if f.offset in inspection.stubs]
    units = [f for f in runnable if f.offset not in inspection.stubs]
    in_units = union(units).targets
    differs = difference(expected, found)
    missing, extra = differs.missing.targets, differs.extra.targets
    relocatable = union(f for f in inspection.fatbins if f.section == RELOCATABLE_SECTION).targets

    # extras: a stub's empty cubins, nvcc's default, or a build with its own list. nvcc's default
    # is a translation unit holding exactly sm_75 + compute_75; a lone sm_75 is someone's list.
    default_unit = any(f.targets.targets == _NVCC_DEFAULT_PAIR for f in units)
    by_cause: dict[Cause, set[Target]] = {}
    for t in extra:
        if t not in in_units and any(t in f.targets.targets for f in stubs):
            cause = Cause.DEVICE_LINK_STUB
        elif _is_nvcc_default(t) and default_unit:
            cause = Cause.NVCC_DEFAULT
        else:
            cause = Cause.BUILD_OVERRIDE
        by_cause.setdefault(cause, set()).add(t)
    for cause, targets in by_cause.items():
        note = ""
        if cause is Cause.DEVICE_LINK_STUB and any(_is_nvcc_default(t) for t in targets):
            note = " (sm_75 is nvcc's default: the link step got no -gencode)"
        findings.append(AssertionFinding("extra", f"{name} holds unrequested {_names(targets)}{note}", cause,
                                         tuple(ArchList.of(targets))))

    # missing: dropped by -rdc's device link, by the build's own list, or by the recipe's map
    dropped: dict[Cause, set[Target]] = {}
    foreign = any(c is not Cause.DEVICE_LINK_STUB for c in by_cause)
    # the same test as for extras: every unit holds exactly nvcc's default pair (a lone sm_75 is a list)
    only_default = bool(units) and all(f.targets.targets == _NVCC_DEFAULT_PAIR for f in units)
    for t in missing:
        if t in relocatable:
            cause = Cause.RDC_LINK
        elif only_default:
            cause = Cause.NVCC_DEFAULT  # no arch flags reached nvcc at all
        elif foreign or expected_from is None:
            cause = Cause.BUILD_OVERRIDE
        else:
            cause = Cause.RECIPE_OVERRIDE
        dropped.setdefault(cause, set()).add(t)
    for cause, targets in dropped.items():
        findings.append(AssertionFinding("missing", f"{name} lacks requested {_names(targets)}", cause,
                                         tuple(ArchList.of(targets))))

    # per translation unit: each fatbin must hold what its siblings hold
    if len(units) > 1:
        for index, fatbin in enumerate(units, 1):
            lacks = in_units - fatbin.targets.targets
            if lacks:
                findings.append(AssertionFinding(
                    "incomplete-tu",
                    f"{name}: fatbin {index} of {len(units)} ({fatbin.section} at {fatbin.offset:#x}, "
                    f"holding {fatbin.targets.canonical()}) lacks {_names(lacks)} that its siblings have",
                    Cause.TU_FLAGS, tuple(ArchList.of(lacks)),
                ))
    return ExtensionResult(name, expected, expected_from, found, tuple(findings), inspection)


def judge_families(inspection: SoInspection, expected: ArchList, families: tuple[FamilyTargets, ...], *,
                   expected_from: str | None = None, cuda_package: bool = True,
                   cuda: str | None = None) -> ExtensionResult:
    """One extension of a build with kernel families (pure). Each TU's fatbin is matched to its
    source through the symbol table (:mod:`farm.binary.tusources`): a TU of a family must hold
    exactly the family's targets; the other TUs are judged by :func:`judge` against ``expected``."""
    name = inspection.path
    if not inspection.has_device_code:
        return judge(inspection, expected, expected_from=expected_from, cuda_package=cuda_package, cuda=cuda)
    findings: list[AssertionFinding] = []
    sources = inspection.sources
    if sources is None:
        base = judge(inspection, expected, expected_from=expected_from, cuda_package=cuda_package, cuda=cuda)
        findings.append(AssertionFinding(
            "no-symbols", f"{name}: kernel families are declared but the .so has no symbol table (stripped): "
            "which translation unit belongs to which family cannot be read", Cause.NO_SYMBOLS))
        return ExtensionResult(name, expected, expected_from, base.found, (*base.findings, *findings), inspection)
    # a family's globs name TUs only in an extension holding a family's own source (the CMake
    # target the families build into): another's TUs (an external project's flash-attn) no glob
    # names, however broad (Machete's folder ``*.cu``)
    own = {stem for family in families for stem in family.stems}
    globs = not own.isdisjoint(sources.values())
    rest: list[Fatbin] = []
    built = NONE  # the targets of the families with a TU in this .so
    held: dict[str, None] = {}  # the families with a TU in it, in order
    for fatbin in inspection.fatbins:
        unit = sources.get(fatbin.offset)
        owners = (unit_owners(unit, families, globs=globs)
                  if unit is not None and fatbin.section != RELOCATABLE_SECTION else [])
        if not owners or fatbin.offset in inspection.stubs:
            rest.append(fatbin)
            continue
        holds = fatbin.targets.canonical() or "nothing"
        where = f"{name}: TU {unit}.cu (fatbin at {fatbin.offset:#x}, holding {holds})"
        if len({targets for _, targets, _ in owners}) > 1:
            findings.append(AssertionFinding(
                "family-ambiguous", f"{where} matches sources of kernel families whose targets differ: "
                + "; ".join(f"{key} of {', '.join(names)}" for key, _, names in owners), Cause.NO_SYMBOLS))
            continue
        key, targets, names = owners[0]
        built |= targets
        held.update(dict.fromkeys(n for _, _, found in owners for n in found))
        differs = difference(targets, fatbin.targets)
        if differs:
            findings.append(AssertionFinding(
                "family-targets", f"{where} is in kernel family {' + '.join(names)} ({key}), which must hold "
                f"exactly {targets.canonical() or '(nothing)'}: missing {differs.missing.canonical() or '-'}, extra "
                f"{differs.extra.canonical() or '-'}", Cause.FAMILY, tuple(differs.missing | differs.extra)))
    # the TUs outside every family, with the whole file's reader and toolkit checks
    others = SoInspection(name, Reader.NATIVE, tuple(rest), None, inspection.disagreement, inspection.stubs,
                          inspection.stubs_checked, inspection.made_by, sources)
    outside = any(f.offset not in inspection.stubs for f in runnable(rest))
    if outside:
        base = judge(others, expected, expected_from=expected_from, cuda_package=cuda_package, cuda=cuda)
        findings[:0] = base.findings
    else:  # every TU is in a family: only the whole-file checks apply to the rest
        base = judge(others, NONE, expected_from=expected_from, cuda_package=cuda_package, cuda=cuda)
        findings[:0] = [f for f in base.findings if f.code in ("readers-disagree", "toolkit-mismatch")]
    # recorded for the whole .so: what its TUs together must hold, and what they hold
    whole = expected_list(expected, built, outside=outside)
    return ExtensionResult(name, whole, expected_from, inspection.found, tuple(findings), inspection, tuple(held))


def assert_inspection(wheel: str, inspections: tuple[SoInspection, ...], expected: Expected, *,
                      vendored: tuple[SoInspection, ...] = (), tools: Tools | None = None) -> AssertionReport:
    """The assertion over already-inspected extensions (pure)."""
    results = []
    for insp in inspections:
        archs, glob = expected.for_extension(insp.path)
        if expected.families:
            results.append(judge_families(insp, archs, expected.families, expected_from=glob,
                                          cuda_package=expected.cuda_package, cuda=expected.cuda))
        else:
            results.append(judge(insp, archs, expected_from=glob, cuda_package=expected.cuda_package,
                                 cuda=expected.cuda))
    findings: list[AssertionFinding] = []
    if not inspections and not expected.allow_no_extensions:
        findings.append(AssertionFinding("no-extensions", f"{wheel} contains no extension module (.so/.pyd)",
                                         Cause.NO_EXTENSIONS))
    elif expected.families:  # a family the cell builds must have left a TU in some extension
        seen = {stem for insp in inspections for stem in (insp.sources or {}).values()}
        # a glob's TUs count where they were judged as the family's: a folder's ``*.cu`` names any TU
        held = {n for result in results for n in result.families}
        findings.extend(AssertionFinding(
            "family-absent", f"{wheel}: kernel family {family.name} ({family.targets.canonical()}) has no "
            f"translation unit in any extension (sources {', '.join((*family.sources, *family.patterns))})",
            Cause.FAMILY, tuple(family.targets))
            for family in expected.families if family.targets and family.name not in held and not family.stems & seen)
    return AssertionReport(wheel, expected, tuple(results), tuple(findings), tools or Tools(),
                           tuple(VendoredResult(v.path, v.found, expected.for_vendored(v.path), v.disagreement)
                                 for v in vendored))


def assert_wheel(wheel: Path, expected: Expected, *, cuobjdump: Path | None = None) -> AssertionReport:
    """Inspect ``wheel`` with both readers and judge every extension against ``expected``.

    A missing cuobjdump raises :class:`~farm.errors.ToolError`; a corrupt wheel or binary raises
    :class:`~farm.errors.WheelError` / :class:`~farm.errors.BinaryFormatError`: never "unverified".
    """
    # stubs change the verdict on an extension (judge), never on a vendored library (its found set)
    # every cubin is read (its structure checked, its toolkit note taken) whether or not a CUDA
    # line is expected: a damaged cubin fails the assertion either way
    inspection = inspect_wheel(Path(wheel), Reader.BOTH, cuobjdump=cuobjdump, vendored_stubs=False, made_by=True,
                               sources=bool(expected.families))
    return assert_inspection(str(wheel), inspection.extensions, expected, vendored=inspection.vendored,
                             tools=inspection.tools)
