"""A publish shard: the built cells of one build shard, published one artifact at a time.

No job ever holds a wave. The publish job of build shard I walks that shard's cells in plan order;
for each it downloads the cell's ``wheels-<id>`` artifact into a scratch folder, reads it (the same
checks as any artifact, :func:`farm.schedule.outcome.read_artifacts`), hands the cell to the
publisher (gate, upload, ledger record) and deletes the folder before the next cell. So the job's
disk peaks at its largest artifact plus the checkout, whatever the size of the wave; and one
cell's refusal, a full disk or a failed download is that cell's verdict, never the shard's.

:func:`publish_shard` is the loop, with the download and the publish passed in (GitHub's REST
API and ``farm upload`` in CI, the loopback GitHub in the drain simulation). Its verdicts
are the shard's report, which ``farm wave --reports`` reads to decide the next wave.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import FarmError, UsageError, clip
from farm.fsutil import remove, tree_bytes
from farm.model.cells import Cell
from farm.provenance.buildinfo import BUILD_INFO_NAME, name_problems, read_wheel
from farm.schedule.outcome import ARTIFACT_PREFIX, CellResult, read_artifacts

# What a cell ended as. Only "published" takes it out of the queue (its ledger record exists).
PUBLISHED = "published"
FAILED = "failed"  # no artifact: the build failed, was cancelled or never ran
REFUSED = "refused"  # the gate or a target refused its wheel: a defect to look at
ERROR = "error"  # the download or the publish broke (disk full, network, limits): retried next wave
STATUSES = (PUBLISHED, FAILED, REFUSED, ERROR)
REPORT_PREFIX = "published-"
# A report holds one line of a few hundred bytes per cell of a shard (256): far below this.
MAX_REPORT_BYTES = 64 << 20


@dataclass(frozen=True)
class CellVerdict:
    id: str
    package: str
    status: str
    wheels: tuple[str, ...] = ()
    detail: str = ""
    artifact_bytes: int = 0  # what the cell's artifact held on disk while it was published

    @property
    def built(self) -> bool:
        """Out of the queue: the wheel is published and recorded."""
        return self.status == PUBLISHED

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "package": self.package, "status": self.status, "wheels": list(self.wheels),
                "detail": self.detail, "artifact_bytes": self.artifact_bytes}

    @classmethod
    def from_json(cls, data: Any, where: str) -> CellVerdict:
        """A verdict from a shard's report (an artifact of this run: checked, not believed)."""
        try:
            status = data["status"]
            wheels = data.get("wheels") or []
            if not isinstance(wheels, list) or not all(isinstance(w, str) for w in wheels):
                raise TypeError(f"wheels must be a list of file names, not {clip(json.dumps(wheels), 60)}")
            verdict = cls(str(data["id"]), str(data["package"]), str(status), tuple(wheels),
                          str(data.get("detail") or ""), int(data.get("artifact_bytes") or 0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: not a publish report entry ({clip(exc, 200)})",
                             hint="pass the published-* artifacts `farm publish-shard` wrote") from None
        if verdict.status not in STATUSES:
            raise UsageError(f"{where}: unknown status {verdict.status!r} for {verdict.id}",
                             hint=f"one of {', '.join(STATUSES)}")
        return verdict


# fetch(cell id, folder): download the cell's artifact into folder; False when it has none.
Fetch = Callable[[str, Path], bool]
# publish(cell): (status, detail) for a cell whose artifact holds a wheel.
Publish = Callable[[CellResult], tuple[str, str]]


def publish_cell(cell_id: str, package: str, fetch: Fetch, publish: Publish, scratch: Path) -> CellVerdict:
    """Download, read, publish and delete one cell's artifact; every failure is its verdict."""
    folder = scratch / f"{ARTIFACT_PREFIX}{cell_id}"
    remove(folder)  # whatever a download left there (a folder, or a link: never followed)
    try:
        try:
            found = fetch(cell_id, folder)
        except OSError as exc:  # ENOSPC, a broken download: this cell waits for the next wave
            return CellVerdict(cell_id, package, ERROR, detail=f"download: {exc.strerror or exc}",
                               artifact_bytes=tree_bytes(folder).held)
        except FarmError as exc:
            return CellVerdict(cell_id, package, ERROR, detail=f"download: {exc.message}",
                               artifact_bytes=tree_bytes(folder).held)
        if not found:
            return CellVerdict(cell_id, package, FAILED, detail="no artifact: the build job failed or did not run")
        size = tree_bytes(folder).held
        why: list[str] = []
        try:
            files = tuple(read_artifacts(scratch, warn=why.append).get(cell_id, ()))
        except FarmError as exc:  # a link, a device, an oversized file: another job's output, not believed
            return CellVerdict(cell_id, package, REFUSED, detail=exc.message, artifact_bytes=size)
        result = CellResult(cell_id, package, tuple(p.name for p in files if p.name.endswith(".whl")), files)
        if not result.built:
            return CellVerdict(cell_id, package, FAILED, detail="; ".join(why) or "the artifact holds no wheel",
                               artifact_bytes=size)
        try:
            status, detail = publish(result)
        except OSError as exc:
            status, detail = ERROR, f"publish: {exc.strerror or exc}"
        except FarmError as exc:
            status, detail = ERROR, f"publish: {exc.message}"
        return CellVerdict(cell_id, package, status, result.wheels, detail, size)
    finally:
        remove(folder)


def not_the_cells(cell_id: str, wheel: Path) -> str | None:
    """Why ``wheel`` is not ``cell_id``'s own wheel, or None when it is: its provenance must name
    that cell (package, version, CUDA line, torch, Python, platform) and its file name (project,
    version, local label, tags) must agree with that provenance. A build job's artifact is
    another job's output: a cp312 cell's artifact holding the cp311 wheel publishes nothing."""
    try:
        info = read_wheel(wheel)
    except FarmError as exc:
        return f"{wheel.name}: {exc.message}"
    if info is None:
        return f"{wheel.name} holds no {BUILD_INFO_NAME}: not a wheel farm built for cell {cell_id}"
    c = info.cell
    built_for = (Cell(info.package, info.version, c.cuda, c.torch, c.python, c.platform).id
                 if info.package and c.cuda and c.torch and c.python and c.platform else "an unknown cell")
    if built_for != cell_id:
        return (f"{wheel.name} was built for cell {built_for}, not for cell {cell_id}: a cell publishes only its "
                f"own wheel")
    wrong = name_problems(wheel.name, info)
    if wrong:
        return f"{wheel.name}: its file name is not cell {cell_id}'s ({'; '.join(wrong)})"
    return None


def publish_shard(cells: Iterable[tuple[str, str]], fetch: Fetch, publish: Publish, scratch: Path,
                  *, on_verdict: Callable[[CellVerdict], None] | None = None) -> list[CellVerdict]:
    """:func:`publish_cell` for each (id, package), in order; ``on_verdict`` sees each as it comes
    (the command appends it to the report at once: a killed job loses at most the cell in hand)."""
    scratch.mkdir(parents=True, exist_ok=True)
    out = []
    for cell_id, package in cells:
        verdict = publish_cell(cell_id, package, fetch, publish, scratch)
        out.append(verdict)
        if on_verdict is not None:
            on_verdict(verdict)
    return out


def read_reports(paths: Iterable[Path]) -> dict[str, CellVerdict]:
    """cell id -> verdict, from report files (one JSON object a line). A cell reported twice keeps
    its best verdict (a publish job retried by a re-run reports it again)."""
    rank = {s: i for i, s in enumerate((PUBLISHED, REFUSED, ERROR, FAILED))}
    out: dict[str, CellVerdict] = {}
    for path in paths:
        try:
            text = jsonread.read_bounded(path, MAX_REPORT_BYTES).decode("utf-8")
        except (OSError, ValueError) as exc:  # a FIFO, a device, a runaway file, not UTF-8
            raise UsageError(f"{path}: cannot read the publish report ({clip(exc, 200)})",
                             hint="pass the published-* artifacts `farm publish-shard` wrote") from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = jsonread.loads(line)
            except ValueError as exc:
                raise UsageError(f"{path}:{n}: not JSON farm wrote ({clip(exc, 200)})",
                                 hint="a publish report holds one JSON verdict a line") from None
            v = CellVerdict.from_json(data, f"{path}:{n}")
            if v.id not in out or rank[v.status] < rank[out[v.id].status]:
                out[v.id] = v
    return out


def shard_cells(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The cells a publish shard publishes: the wheel-making entries of a build shard (ordinary
    cells and link jobs; a compile shard makes objects, not a wheel), once each, in order."""
    seen: dict[str, str] = {}
    for e in entries:
        shard = e.get("shard")
        if shard and shard != "link":
            continue
        seen.setdefault(str(e["id"]), str(e["package"]))
    return list(seen.items())
