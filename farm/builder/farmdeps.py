"""A farm wheel as another package's build dependency (spconv builds against farm's own cumm).

A recipe names it in ``build.extra_deps`` with the placeholders of ``requires_dist``:
``cumm=={version:cumm}+{local:cumm}`` becomes, for a CUDA 12.8 cell, ``cumm==0.7.11+cu128``: the
farm wheel of the same cell, which only farm's wheelhouse (or index) has. Before the build
environment is made, :func:`resolve` finds that wheel in the wheelhouse (``farm build --out``):
the project and exact version, a tag this cell's interpreter and platform install, and
provenance saying farm asserted it for this very cell (CUDA line, torch, Python, platform), and
bytes whose sha256 is the one recorded for that file name: in its ledger fragment beside it
(``<wheel>.ledger.json``, written by postbuild) or in the ledger. A wheel that is missing, not
farm's, unrecorded or changed since it was recorded stops the build before anything is
installed. The requirement is then installed as a direct reference with the wheel's sha256
(``cumm @ file:///.../cumm-...whl#sha256=...``): the build environment's identity changes with
the wheel's bytes, pip checks them, and the wheel's name and sha256 go into the provenance
(``toolchain.farm_deps``).

Both builders take the same wheels. The native builder installs them from the wheelhouse; for
cibuildwheel's container, :func:`stage` copies them into a folder of the build's own, checks the
copies' sha256 again, and the plan mounts that folder read-only at
:data:`CONTAINER_FARM_DEPS` (a volume in cibuildwheel's ``container-engine`` ``create_args``),
where ``before-build`` installs each by its direct reference, its sha256 pinned, so pip inside the
container checks the bytes a third time.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from farm.errors import FarmError, UsageError, WheelError
from farm.fsutil import sha256_file
from farm.model.cells import Cell
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX, read_fragment
from farm.provenance.postbuild import read_embedded

CONTAINER_FARM_DEPS = "/opt/farm/farm-deps"  # where a build container sees the farm wheels it builds against


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
        """The direct reference to this wheel at ``url`` (the container's path of its copy)."""
        return f"{Requirement(self.requirement).name} @ {url}#sha256={self.sha256}"

    @property
    def container_reference(self) -> str:
        return self.reference_at(f"file://{CONTAINER_FARM_DEPS}/{self.wheel.name}")

    def record(self) -> dict[str, str]:
        return {"requirement": self.requirement, "filename": self.wheel.name, "sha256": self.sha256}


def _tags_fit(wheel: str, cell: Cell) -> bool:
    _, _, _, tags = parse_wheel_filename(wheel)
    arch = cell.platform.split("_", 1)[1]  # linux_x86_64 -> x86_64; win_amd64 -> amd64
    return any(t.interpreter in (cell.python, "py3") and (t.platform == cell.platform or (
        t.platform.startswith(("manylinux", "musllinux")) and t.platform.endswith(arch))) for t in tags)


def recorded_sha256(wheel: Path, ledger: LedgerIndex | None) -> tuple[str, str] | None:
    """The sha256 recorded for ``wheel``'s file name, and where: its ledger fragment beside it,
    else the ledger's line; None when neither records it."""
    fragment = Path(f"{wheel}{FRAGMENT_SUFFIX}")
    if fragment.is_file():
        try:
            _, record = read_fragment(fragment)
        except FarmError as exc:
            raise WheelError(f"{fragment.name} does not read: {exc.message}", where=str(fragment),
                             hint=f"rebuild {wheel.name} with farm build (postbuild writes the fragment)") from None
        return record.sha256, str(fragment)
    line = ledger.by_filename(wheel.name) if ledger is not None else None
    return None if line is None or ledger is None else (line.sha256, f"{ledger.path}:{line.line}")


def resolve(requirements: Sequence[str], cell: Cell, wheelhouse: Path, *,
            ledger: LedgerIndex | None = None) -> tuple[FarmDep, ...]:
    """The asserted farm wheel in ``wheelhouse`` for each requirement (``name==version+local``),
    its bytes the ones its ledger fragment or ``ledger`` records."""
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
            info = read_embedded(wheel)
        except FarmError as exc:
            raise UsageError(f"{wheel.name} has unreadable provenance: {exc.message}", where=str(wheel)) from None
        own = {"cuda": cell.cuda, "python": cell.python, "platform": cell.platform}
        if info is None or info.provenance != "asserted" or any(
                getattr(info.cell, key) != value for key, value in own.items()):
            raise UsageError(f"{wheel.name} is not farm's asserted wheel for cell {cell.id}'s CUDA line, Python "
                             "and platform", where=str(wheel),
                             hint=f"rebuild it with farm build {req.name} (its _build_info.json must say so)")
        digest = sha256_file(wheel)
        recorded = recorded_sha256(wheel, ledger)
        if recorded is None:
            raise UsageError(f"{wheel.name} is not recorded: no {wheel.name}{FRAGMENT_SUFFIX} beside it and no "
                             "ledger line names it, so its bytes cannot be checked", where=str(wheel),
                             hint=f"rebuild it with farm build {req.name} --out {wheelhouse} (postbuild records it)")
        if recorded[0] != digest:
            raise WheelError(f"{wheel.name} is not the wheel farm recorded: its sha256 is {digest}, {recorded[1]} "
                             f"records {recorded[0]}", where=str(wheel),
                             hint=f"the file changed after it was built; rebuild it with farm build {req.name}")
        found.append(FarmDep(requirement, wheel, digest))
    return tuple(found)


def stage(deps: Sequence[FarmDep], folder: Path) -> Path:
    """Copies of ``deps`` in ``folder`` (emptied first), each copy's sha256 checked against the
    resolved one: the container is given exactly the bytes that were verified."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for dep in deps:
        copy = folder / dep.wheel.name
        shutil.copyfile(dep.wheel, copy)
        if sha256_file(copy) != dep.sha256:
            raise WheelError(f"{dep.wheel.name} changed while it was copied for the build container",
                             where=str(dep.wheel), hint="rebuild it with farm build, then build again")
    return folder
