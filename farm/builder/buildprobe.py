"""``farm build PKG --probe``: the proof of a cell's wiring for a package whose whole build does
not fit the host, made by the real chain and judged as a wheel would be, per translation unit.

The chain runs unchanged up to nvcc: the source at its pin, the recipe's patch, the as-built lint,
the toolkit check, the build environment (torch included), and the package's own build with the
cell's arch list and toolkit. The build's nvcc calls go through the sharding launcher
(:mod:`farm.builder.shard`) in probe mode: the first TU of each extension is compiled by the real
nvcc, with the flags the build gave it; every other TU is an empty stand-in, so the rest of the
build (host files, link) runs quickly to its end. Then each compiled object is read by both
readers (farm's and cuobjdump) and judged like a wheel's TU: the cell's list (the extension's own
where the recipe declares one, a kernel family's where the TU is in one), no other targets, and
device code made by the cell's CUDA line.

A probe is not a build: the wheel it makes holds stand-ins, so it is deleted; nothing is written
to the output folder or the ledger, and the cell stays unbuilt.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.binary.archrule import Expected
from farm.binary.assertion import judge, judge_families
from farm.binary.inspection import Reader, inspect_file
from farm.builder import shard, shardjob
from farm.builder.shardjob import ShardSetup
from farm.errors import DefectError, FarmError, ToolError
from farm.model.arch import ArchList


@dataclass(frozen=True)
class ProbedUnit:
    """One extension's first TU: what it was compiled into and how it was judged."""

    extension: str  # TORCH_EXTENSION_NAME, or the flags' digest where the build names none
    tu: str  # relative to the source root
    expected: ArchList
    expected_from: str  # "the cell's list", the recipe's glob, or the kernel family
    found: ArchList
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"extension": self.extension, "tu": self.tu, "expected": self.expected.canonical(),
                "expected_from": self.expected_from, "found": self.found.canonical(),
                "passed": self.passed, "problems": list(self.problems)}


@dataclass(frozen=True)
class ProbeReport:
    cell: str
    units: tuple[ProbedUnit, ...]
    stand_ins: int  # TUs the build compiled as empty stand-ins

    @property
    def passed(self) -> bool:
        return bool(self.units) and all(u.passed for u in self.units)

    def to_json(self) -> dict[str, Any]:
        return {"job": "probe", "cell": self.cell, "passed": self.passed, "stand_ins": self.stand_ins,
                "units": [u.to_json() for u in self.units]}

    def render(self) -> str:
        lines = [(f"{self.cell}: PROBE (no wheel, nothing published): the first TU of each of "
                 f"{len(self.units)} extension(s) compiled with the cell's flags, {self.stand_ins} other TU(s) "
                 "left as stand-ins")]
        for u in self.units:
            verdict = "ok" if u.passed else "FAILED"
            lines.append(f"  {u.extension}: {u.tu}: found {u.found.canonical() or '(nothing)'}, expected "
                         f"{u.expected.canonical()} ({u.expected_from}): {verdict}")
            lines += [f"    {p}" for p in u.problems]
        return "\n".join(lines)


def _expected_for(expected: Expected, extension: str, tu: str) -> tuple[ArchList, str]:
    """The list a TU of ``extension`` must hold: its kernel family's, the recipe's glob for the
    extension (matched against the extension's name, as a wheel's member would be), else the cell's."""
    # a source in several families gets all of their targets, as CMake's flags add up; a generated
    # one is matched by its family's glob
    owners = [f for f in expected.families
              if tu in f.sources or any(fnmatch.fnmatchcase(tu, p) for p in f.patterns)]
    if owners:
        return (ArchList.of(t for f in owners for t in f.targets.targets),
                f"kernel family {' + '.join(f.name for f in owners)}")
    for glob, archs in expected.per_extension:
        if fnmatch.fnmatchcase(extension, glob) or fnmatch.fnmatchcase(f"{extension}.so", glob):
            return archs, f"extensions: {glob!r}"
    return expected.default, "the cell's list"


def judge_unit(path: Path, extension: str, tu: str, expected: Expected, cuobjdump: Path) -> ProbedUnit:
    """One compiled object, read by both readers and judged as a wheel's TU (pure but for the reads)."""
    archs, where = _expected_for(expected, extension, tu)
    try:
        inspection = inspect_file(path, Reader.BOTH, cuobjdump=cuobjdump, label=f"{extension}: {tu}",
                                  made_by=True, sources=bool(expected.families))
    except FarmError as exc:
        return ProbedUnit(extension, tu, archs, where, ArchList.of(()), (f"unreadable object: {exc}",))
    result = (judge_families(inspection, archs, expected.families, expected_from=where, cuda=expected.cuda)
              if expected.families else judge(inspection, archs, expected_from=where, cuda=expected.cuda))
    return ProbedUnit(extension, tu, archs, where, inspection.found, tuple(f.message for f in result.findings))


def finish_probe(setup: ShardSetup, build_error: Exception | None, expected: Expected,
                 cuobjdump: Path) -> ProbeReport:
    """The probe's verdict from the launcher's log: every extension's first TU compiled, read and
    judged. A build that failed, or compiled no TU through the launcher, raises (naming the TUs)."""
    log = shardjob.read_log(setup)
    failed, compiled = shardjob.split_log(log)
    if build_error is not None:
        # the build's own error without its hint: the probe's hint says what its stage means
        detail = build_error.message if isinstance(build_error, FarmError) else str(build_error)
        if failed:
            what, hint = f"nvcc failed on {', '.join(failed)}", "read the build log above"
        elif compiled:
            what = f"after {len(compiled)} probed TU(s) compiled ({', '.join(r['tu'] for r in compiled[:5])})"
            hint = ("read the build log above: a failure after the probed TUs may come from a step that cannot "
                    "take the empty stand-ins (then only a full build can prove the cell)")
        else:
            what = "before any CUDA TU reached farm's nvcc launcher"
            hint = ("read the build log above: the package's build stopped before nvcc, as a full build would "
                    "(a build dependency the recipe's extra_deps lacks, the package's own checks, a host file)")
        raise ToolError(f"cell {setup.cell}: probe: the build failed, {what}: {detail}", hint=hint)
    if not compiled:
        raise DefectError(
            f"cell {setup.cell}: probe: the build compiled no CUDA TU through farm's nvcc launcher",
            hint="the package's build does not run $PYTORCH_NVCC, $CMAKE_CUDA_COMPILER_LAUNCHER or nvcc from PATH "
                 "(or has no CUDA TU): a probe cannot see it; build the cell in full")
    objects = setup.directory / shard.OBJECTS
    units = tuple(judge_unit(objects / r["file"], r["extension"], r["tu"], expected, cuobjdump)
                  for r in sorted(compiled, key=lambda r: (r["extension"], r["tu"])))
    stand_ins = len({r["tu"] for r in log if r["status"] == "skipped"})
    return ProbeReport(setup.cell, units, stand_ins)


def discard(wheels: tuple[Path, ...] | list[Path], folders: tuple[Path, ...]) -> None:
    """A probe's wheels hold stand-in objects: the repaired ones and every wheel left in the
    build's output ``folders`` (the raw wheel before repair) are deleted, never picked up."""
    for wheel in [*wheels, *(w for folder in folders if folder.is_dir() for w in folder.glob("*.whl"))]:
        Path(wheel).unlink(missing_ok=True)
