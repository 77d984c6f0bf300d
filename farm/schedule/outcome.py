"""What a wave built, what failed, and what the workflow does next.

A wave is one workflow run: the matrix job schedules at most the run's job capacity (see
:func:`farm.schedule.waves.schedule`), each cell job uploads its wheelhouse as the artifact
``wheels-<cell id>``, the publish job of each build shard publishes those artifacts one at a time
(farm/schedule/stream.py, each cell's artifact checked by :func:`read_artifacts`) and reports a verdict per cell.
The chain job then decides here, from the reports (:func:`from_reports`), never from the wheels:

- a cell is **built** when its wheel was published and recorded; otherwise it **failed** (its job
  failed or was cancelled, its wheel was refused, its publish broke, or no verdict came back).
  A failed cell is not in the ledger, so it stays in the queue;
- the **next wave** starts when this one built something and cells wait: deferred by the
  matrix, its own failed ones, or cells it left out because a run before it still held them (a
  wave that built nothing stops the chain, so cells that keep failing never loop forever). A
  wave that deferred cells has started the next one already, when its builds ended (the
  workflow's ``next-wave`` job), while it publishes.

:func:`from_reports` is pure; :func:`read_artifacts` is the I/O around it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from farm.binary.wheelfile import DEFAULT_LIMITS
from farm.errors import UsageError
from farm.fsutil import open_plain

if TYPE_CHECKING:  # stream.py builds on this module
    from farm.schedule.stream import CellVerdict

ARTIFACT_PREFIX = "wheels-"
FRAGMENT_SUFFIX = ".ledger.json"


@dataclass(frozen=True)
class CellResult:
    """One scheduled cell and the files its job handed back (none when it failed)."""

    id: str
    package: str
    wheels: tuple[str, ...]
    files: tuple[Path, ...]  # everything in its artifact: wheels and ledger fragments
    status: str = ""  # the publish verdict, when the outcome comes from the publish reports
    detail: str = ""

    @property
    def built(self) -> bool:
        return bool(self.wheels)


@dataclass(frozen=True)
class WaveOutcome:
    cells: tuple[CellResult, ...]
    deferred: int  # cells the matrix left for a later run
    held: int = 0  # cells the matrix left out: a run still building or publishing held them

    @property
    def built(self) -> tuple[CellResult, ...]:
        return tuple(c for c in self.cells if c.built)

    @property
    def failed(self) -> tuple[CellResult, ...]:
        return tuple(c for c in self.cells if not c.built)

    @property
    def publish(self) -> bool:
        """Publish whenever a cell built: one broken cell never discards the others' wheels."""
        return bool(self.built)

    @property
    def next_wave(self) -> bool:
        """Start the next run when this one made progress and cells are still waiting: deferred
        ones, or its own failed ones (waiting for the nightly would leave every runner idle up to
        a day for them; a run that builds nothing stops the chain), or ones an earlier run held
        when this one was planned (published since, or failed and waiting)."""
        return bool(self.built) and (self.deferred > 0 or bool(self.failed) or self.held > 0)

    def failed_by_package(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for c in self.failed:
            out.setdefault(c.package, []).append(c.id)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "scheduled": len(self.cells), "built": len(self.built), "failed": len(self.failed),
            "deferred": self.deferred, "held": self.held, "publish": self.publish, "next_wave": self.next_wave,
            "failed_cells": [{"id": c.id, "package": c.package, "status": c.status or "failed", "detail": c.detail}
                             for c in self.failed],
            "built_cells": [{"id": c.id, "package": c.package, "wheels": list(c.wheels)} for c in self.built],
        }


def plan_cells(plan: Mapping[str, Any]) -> tuple[list[tuple[str, str]], int, int]:
    """A plan's scheduled cells (id, package), its deferred and its held count, checked."""
    try:
        cells = [(str(c["id"]), str(c["package"])) for c in plan["cells"]]
        deferred, held = int(plan["totals"]["deferred"]), int(plan.get("held", 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"not a matrix plan ({exc!r} is missing or malformed)",
                         hint="pass the JSON `farm matrix --plan FILE` wrote for this run") from None
    return cells, deferred, held


# What an artifact may hold: a wheel no larger than the wheel reader accepts uncompressed, a ledger
# fragment (one record) far below MAX_FRAGMENT; a zip is at least its end record (22 bytes).
MAX_WHEEL = DEFAULT_LIMITS.max_total
MAX_FRAGMENT = 4 << 20
_ZIP_MIN = 22
_ZIP_MAGIC = b"PK\x03\x04"


def _refuse_entry(path: Path, what: str) -> UsageError:
    return UsageError(f"{path}: {what}: an artifact holds plain files only",
                      hint="download the run's artifacts again; never publish from a folder a job could have "
                           "planted links or devices in")


def _not_a_wheel(path: Path, info: os.stat_result) -> str | None:
    """Why ``path`` (a regular file named .whl) is not a built wheel, or None."""
    if info.st_size < _ZIP_MIN:
        return f"{info.st_size} bytes"
    with _open_plain(path) as fh:
        if fh.read(4) != _ZIP_MAGIC:
            return "not a zip archive"
    return None


def _open_plain(path: Path) -> BinaryIO:
    """``path`` opened for reading, refused unless it is a regular file (never through a link)."""
    try:
        return open_plain(path)
    except OSError as exc:
        raise _refuse_entry(path, f"cannot be opened as a plain file ({exc.strerror or exc})") from None
    except ValueError:
        raise _refuse_entry(path, "not a regular file") from None


def _artifact_files(sub: Path) -> list[Path]:
    """The files of one ``wheels-<id>`` folder, every entry checked without following links:
    a link, device, FIFO or socket anywhere, or a file over its size limit, is refused."""
    files = []
    for dirpath, dirnames, filenames in os.walk(sub):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                raise _refuse_entry(path, f"a link (to {str(path.readlink())!r})")
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                raise _refuse_entry(path, "not a regular file (a device, FIFO or socket)")
            limit = MAX_WHEEL if name.endswith(".whl") else MAX_FRAGMENT if name.endswith(FRAGMENT_SUFFIX) else None
            if limit is not None and info.st_size > limit:
                raise _refuse_entry(path, f"{info.st_size:,} bytes, over the {limit:,} a {Path(name).suffix} may be")
            files.append(path)
    return sorted(files)


def read_artifacts(folder: Path, *, warn: Callable[[str], object] = lambda _: None) -> dict[str, list[Path]]:
    """cell id -> files, from ``folder/wheels-<id>/...`` (download-artifact without merging).
    A missing folder means no cell job uploaded anything: every cell failed. Links and special
    files are refused (exit 2); an artifact whose ``.whl`` is empty or not a zip archive did not
    build a wheel: its cell counts as failed, and ``warn`` says why."""
    out: dict[str, list[Path]] = {}
    if not folder.is_dir():
        return out
    for sub in sorted(folder.iterdir()):
        if not sub.name.startswith(ARTIFACT_PREFIX):
            continue
        info = os.lstat(sub)
        if stat.S_ISLNK(info.st_mode):
            raise _refuse_entry(sub, f"a link (to {str(sub.readlink())!r})")
        if not stat.S_ISDIR(info.st_mode):
            continue
        files = _artifact_files(sub)
        broken = [(p, why) for p in files if p.name.endswith(".whl") and (why := _not_a_wheel(p, os.lstat(p)))]
        cid = sub.name[len(ARTIFACT_PREFIX):]
        if broken:
            for path, why in broken:
                warn(f"{path}: {why}: not a built wheel; cell {cid} counts as failed")
            continue
        out[cid] = files
    return out


def from_reports(plan: Mapping[str, Any], verdicts: Mapping[str, CellVerdict]) -> WaveOutcome:
    """The outcome of a wave from its publish shards' verdicts (cell id -> verdict): a cell is
    built when it was published; a cell with no verdict (its publish job died or was cancelled)
    stays in the queue like a failed one. A verdict for a cell the plan did not schedule is refused."""
    cells, deferred, held = plan_cells(plan)
    strangers = sorted(set(verdicts) - {cid for cid, _ in cells})
    if strangers:
        raise UsageError(f"publish verdict(s) for cells this wave did not schedule: {', '.join(strangers[:5])}"
                         + (f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""),
                         hint="download only this run's published-* artifacts")
    out = []
    for cid, package in cells:
        v = verdicts.get(cid)
        out.append(CellResult(cid, package, v.wheels if v is not None and v.built else (), (),
                              v.status if v is not None else "no verdict", v.detail if v is not None else ""))
    return WaveOutcome(tuple(out), deferred, held)


def summary(outcome: WaveOutcome) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY``: the counts, then every failed cell by package."""
    counts = (f"{len(outcome.built)} cell(s) built, {len(outcome.failed)} failed, "
              f"{outcome.deferred} deferred to the next run")
    lines = ["## farm wave", "", counts, ""]
    if outcome.publish:
        lines.append("The built cells' wheels are published; failed cells stay in the queue.")
    else:
        lines.append("**Nothing was published: no next wave starts.**")
    if outcome.next_wave:
        lines.append("The next wave starts after this run has recorded the ledger.")
    failed = outcome.failed_by_package()
    if failed:
        lines += ["", "### Failed cells", "", "| package | failed | cells |", "|---|---|---|"]
        for package, ids in sorted(failed.items()):
            shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
            lines.append(f"| {package} | {len(ids)} | {shown} |")
        why = [c for c in outcome.failed if c.status and c.status != "failed"]
        if why:  # refused or broken publishes say why; a failed build's log is on its own job
            lines += ["", "### Not published", "", "| cell | verdict | why |", "|---|---|---|"]
            for c in why[:200]:
                first = (c.detail.splitlines() or [""])[0].replace("|", "\\|")[:300]
                lines.append(f"| {c.id} | {c.status} | {first} |")
    return "\n".join(lines) + "\n"


def github_outputs(outcome: WaveOutcome) -> dict[str, str]:
    return {
        "publish": str(outcome.publish).lower(),
        "next_wave": str(outcome.next_wave).lower(),
        "built": str(len(outcome.built)),
        "failed": str(len(outcome.failed)),
        "deferred": str(outcome.deferred),
    }
