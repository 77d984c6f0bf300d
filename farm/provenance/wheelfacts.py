"""A wheel's facts, read once for the gate and the audit: its bytes' sha256, what each extension
and bundled library holds, each extension's sha256, and the provenance it embeds.

An unreadable wheel, binary or ``_build_info.json`` becomes :attr:`WheelFacts.problem`: in a sweep
over thousands of wheels one broken file is a finding, not the end of the sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from farm.binary.inspection import inspect_wheel
from farm.binary.wheelfile import SafeWheel
from farm.errors import FarmError, ToolError
from farm.model.arch import ArchList
from farm.provenance import buildinfo
from farm.provenance.buildinfo import BuildInfo
from farm.provenance.stamp import WheelName

if TYPE_CHECKING:
    from farm.binary.madeby import MadeBy


@dataclass(frozen=True)
class WheelFacts:
    """What the file itself says: bytes, extension contents, embedded provenance."""

    filename: str
    location: str  # path or URL
    sha256: str
    size: int
    found: Mapping[str, ArchList]  # extension archive path -> its targets (native reader)
    extensions: Mapping[str, str]  # extension archive path -> sha256
    embedded: BuildInfo | None
    problem: str | None = None  # unreadable wheel or provenance: judged wheel-wrong
    # with both readers: "<member>: <how they differ>" for each extension they disagree on
    disagreements: tuple[str, ...] = ()
    vendored: Mapping[str, ArchList] = field(default_factory=dict)  # bundled library (*.libs/) -> targets found
    # extension archive path -> the toolkit its device code records; None: not read (the audit)
    made_by: Mapping[str, MadeBy] | None = None


def wheel_facts(path: Path, *, location: str | None = None, reader: str = "native",
                cuobjdump: Path | None = None, made_by: bool = False) -> WheelFacts:
    """Inspect ``path`` (native reader, or ``both``), hash it and its extensions, read its provenance.
    ``made_by``: also read the toolkit each extension's device code records (every payload).
    What cannot be read becomes ``problem`` (the module's docstring says why)."""
    path = Path(path)
    location = location or str(path)
    sha256 = buildinfo.sha256_file(path)
    size = path.stat().st_size
    try:
        # a file pip would not take as a wheel is a finding too (a variant wheel's label apart)
        WheelName.parse(buildinfo.split_variant_label(path.name)[0])
        inspection = inspect_wheel(path, reader, cuobjdump=cuobjdump, stubs=False, made_by=made_by)
        found = {so.path: so.found for so in inspection.extensions}
        made = ({so.path: so.made_by for so in inspection.extensions if so.made_by is not None}
                if made_by else None)
        disagreements = tuple(f"{so.path}: {so.disagreement}" for so in inspection.extensions + inspection.vendored
                              if not so.agrees)
        vendored = {so.path: so.found for so in inspection.vendored}
        with SafeWheel(path) as wheel:
            extensions = {name: wheel.sha256(name) for name in found}
            embedded = buildinfo.read_embedded(wheel, where=location)
    except ToolError:
        raise  # the environment, not the wheel
    except FarmError as exc:
        return WheelFacts(path.name, location, sha256, size, {}, {}, None, problem=_problem(exc, path, location))
    return WheelFacts(path.name, location, sha256, size, found, extensions, embedded,
                      disagreements=disagreements, vendored=vendored, made_by=made)


def _problem(exc: FarmError, path: Path, location: str) -> str:
    """The error with its place inside the wheel (``member: what``); the wheel itself is named
    beside it already. Its fix follows on a second line."""
    where = exc.where or ""
    for wheel in (location, str(path)):
        if where.startswith(wheel):
            where = where[len(wheel):].lstrip("!")
            break
    text = f"{where}: {exc.message}" if where else exc.message
    return f"{text}\n  fix: {exc.hint}" if exc.hint else text
