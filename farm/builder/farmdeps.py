"""A farm wheel as another package's build dependency (spconv builds against farm's own cumm).

A recipe names it in ``build.extra_deps`` with the placeholders of ``requires_dist``:
``cumm=={version:cumm}+{local:cumm}`` becomes, for a CUDA 12.8 cell, ``cumm==0.7.11+cu128``: the
farm wheel of the same cell, which only farm's wheelhouse (or index) has. Before the build
environment is made, :func:`resolve` finds that wheel in the wheelhouse (``farm build --out``):
the project and exact version, a tag this cell's interpreter and platform install, and
provenance saying farm asserted it for this very cell (CUDA line, torch, Python, platform). A
wheelhouse crosses job boundaries (a CI artifact, a folder on a shared disk), so the wheel is then
judged as the upload gate judges it (:func:`farm.provenance.judge.judge`): the ledger fragment
postbuild wrote beside it must hold these very bytes (sha256) under this name with the provenance
the wheel embeds, the assertion must have passed, and the binaries must be the ones the provenance
records. A wheel that is missing, not farm's, or changed since postbuild stops the build before
anything is installed. The requirement is then installed as a direct reference with the wheel's
sha256 (``cumm @ file:///.../cumm-...whl#sha256=...``): the build environment's identity changes
with the wheel's bytes, pip checks them, and the wheel's name and sha256 go into the provenance
(``toolchain.farm_deps``).

Both builders take the same resolved wheels. The native builder installs them from the
wheelhouse; a cibuildwheel container build gets checked copies in a folder of its own, mounted
read-only (``farm.builder.builders.stage_farm_deps``, ``farm.builder.plan.CONTAINER_FARM_DEPS``),
and ``before-build`` installs each by :meth:`FarmDep.reference_at` the mounted copy, its sha256
pinned, so pip inside the container checks the bytes once more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from farm.errors import FarmError, UsageError, clip
from farm.model.cells import NO_TORCH, Cell
from farm.provenance.buildinfo import LedgerEntry, read_wheel
from farm.provenance.judge import GATE, judge
from farm.provenance.ledgerwrite import fragment_path, read_fragment
from farm.provenance.wheelfacts import wheel_facts


@dataclass(frozen=True)
class FarmDep:
    requirement: str  # as the spec has it: cumm==0.7.11+cu128
    wheel: Path
    sha256: str

    @property
    def direct_reference(self) -> str:
        """What the build environment installs: the wheel itself, its bytes pinned."""
        return self.reference_at(self.wheel.resolve().as_uri())

    def reference_at(self, url: str) -> str:
        """The direct reference to this wheel's bytes at ``url`` (a container's copy of it)."""
        return f"{Requirement(self.requirement).name} @ {url}#sha256={self.sha256}"

    def record(self) -> dict[str, str]:
        return {"requirement": self.requirement, "filename": self.wheel.name, "sha256": self.sha256}


def _tags_fit(wheel: str, cell: Cell) -> bool:
    _, _, _, tags = parse_wheel_filename(wheel)
    arch = cell.platform.split("_", 1)[1]  # linux_x86_64 -> x86_64; win_amd64 -> amd64
    return any(t.interpreter in (cell.python, "py3") and (t.platform == cell.platform or (
        t.platform.startswith(("manylinux", "musllinux")) and t.platform.endswith(arch))) for t in tags)


def resolve(requirements: Sequence[str], cell: Cell, wheelhouse: Path) -> tuple[FarmDep, ...]:
    """The asserted farm wheel in ``wheelhouse`` for each requirement (``name==version+local``)."""
    found = []
    for requirement in requirements:
        req = Requirement(requirement)
        wanted = next(iter(req.specifier)).version if len(req.specifier) == 1 else None
        name = canonicalize_name(req.name)
        candidates = []
        for path in sorted(Path(wheelhouse).glob("*.whl")) if Path(wheelhouse).is_dir() else []:
            try:
                dist, version, _, _ = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
            if dist == name and str(version) == wanted and _tags_fit(path.name, cell):
                candidates.append(path)
        if not candidates:
            raise UsageError(f"cell {cell.id} builds against farm's {requirement}, which is not in {wheelhouse}",
                             hint=f"build that cell of {req.name} first (farm build {req.name} with the same "
                                  f"--cuda/--torch/--python/--platform and --out {wheelhouse})")
        wheel = candidates[-1]
        try:
            info = read_wheel(wheel)
        except FarmError as exc:
            raise UsageError(f"{wheel.name} has unreadable provenance: {exc.message}", where=str(wheel)) from None
        own = {"cuda": cell.cuda, "python": cell.python, "platform": cell.platform}
        if info is not None and info.cell.torch != NO_TORCH:  # a torch-linked dependency: the cell's torch too
            own["torch"] = cell.torch
        if info is None or info.provenance != "asserted" or any(
                getattr(info.cell, key) != value for key, value in own.items()):
            raise UsageError(f"{wheel.name} is not farm's asserted wheel for cell {cell.id}'s "
                             f"{', '.join(own)}", where=str(wheel),
                             hint=f"rebuild it with farm build {req.name} (its _build_info.json must say so)")
        found.append(FarmDep(requirement, wheel, _vouched_sha256(wheel, req.name)))
    return tuple(found)


def _vouched_sha256(wheel: Path, name: str) -> str:
    """The wheel's sha256, once the gate's rules hold for it against the fragment beside it."""
    rebuild = f"rebuild it with farm build {name} into the same --out"
    fragment = fragment_path(wheel.parent, wheel.name)
    if not fragment.is_file():
        raise UsageError(f"{wheel.name} has no ledger fragment beside it ({fragment.name}): nothing vouches for "
                         "its bytes", where=str(wheel), hint=rebuild)
    try:
        entry, record = read_fragment(fragment)
    except FarmError as exc:
        raise UsageError(f"{fragment.name} is not a readable ledger fragment: {exc.message}",
                         where=str(fragment), hint=rebuild) from None
    facts = wheel_facts(wheel)
    vouching: LedgerEntry | None = entry if record.sha256 == facts.sha256 else None
    findings = judge(facts, vouching, record.sha256, GATE)
    if findings:
        raise UsageError(f"{wheel.name} is not the wheel farm asserted: "
                         + "; ".join(clip(f.message, 300) for f in findings), where=str(wheel),
                         hint=findings[0].fix if len(findings) == 1 else rebuild)
    return facts.sha256
