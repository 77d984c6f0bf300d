"""What a wave built, what failed, and what the workflow does next.

A wave is one workflow run: the matrix job schedules at most the run's job capacity (see
:func:`farm.schedule.waves.schedule`), each cell job uploads its wheelhouse as the artifact
``wheels-<cell id>``, and the publish job decides here, from the artifacts that came back:

- a cell is **built** when its artifact holds a wheel; otherwise it **failed** (its job failed, was
  cancelled, or its shard never ran). A failed cell is not in the ledger, so it stays in the queue;
- the wave **publishes** the wheels of the built cells, whatever failed beside them (the gate
  still refuses any wheel that is not asserted);
- the **next wave** starts when this one built something and the matrix deferred cells: a wave
  that built nothing stops the chain, so cells that keep failing never loop forever.

:func:`decide` is pure (the plan and the artifact listing in, a :class:`WaveOutcome` out);
:func:`read_artifacts` and :func:`gather` are the I/O around it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import UsageError

ARTIFACT_PREFIX = "wheels-"
FRAGMENT_SUFFIX = ".ledger.json"


@dataclass(frozen=True)
class CellResult:
    """One scheduled cell and the files its job handed back (none when it failed)."""

    id: str
    package: str
    wheels: tuple[str, ...]
    files: tuple[Path, ...]  # everything in its artifact: wheels and ledger fragments

    @property
    def built(self) -> bool:
        return bool(self.wheels)


@dataclass(frozen=True)
class WaveOutcome:
    cells: tuple[CellResult, ...]
    deferred: int  # cells the matrix left for a later run

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
        """Start the next run when this one made progress and cells are still waiting."""
        return bool(self.built) and self.deferred > 0

    def failed_by_package(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for c in self.failed:
            out.setdefault(c.package, []).append(c.id)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "scheduled": len(self.cells), "built": len(self.built), "failed": len(self.failed),
            "deferred": self.deferred, "publish": self.publish, "next_wave": self.next_wave,
            "failed_cells": [{"id": c.id, "package": c.package} for c in self.failed],
            "built_cells": [{"id": c.id, "package": c.package, "wheels": list(c.wheels)} for c in self.built],
        }


def decide(plan: Mapping[str, Any], artifacts: Mapping[str, Sequence[Path]]) -> WaveOutcome:
    """The outcome of a wave whose matrix JSON is ``plan`` (``farm matrix --json``: ``cells`` are
    the scheduled cells, ``totals.deferred`` the rest) given ``artifacts``: cell id -> the files of
    its ``wheels-<id>`` artifact. An artifact of a cell the plan did not schedule is refused: its
    wheels would be published without the matrix having asked for them."""
    try:
        cells = [(str(c["id"]), str(c["package"])) for c in plan["cells"]]
        deferred = int(plan["totals"]["deferred"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"not a matrix plan ({exc!r} is missing or malformed)",
                         hint="pass the JSON `farm matrix --json --max-shards N` wrote for this run") from None
    ids = {cid for cid, _ in cells}
    strangers = sorted(set(artifacts) - ids)
    if strangers:
        raise UsageError(f"artifact(s) for cells this wave did not schedule: {', '.join(strangers[:5])}"
                         + (f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""),
                         hint="download only this run's wheels-* artifacts")
    results = []
    for cid, package in cells:
        files = tuple(sorted(artifacts.get(cid, ())))
        wheels = tuple(p.name for p in files if p.name.endswith(".whl"))
        results.append(CellResult(cid, package, wheels, files))
    return WaveOutcome(tuple(results), deferred)


def read_artifacts(folder: Path) -> dict[str, list[Path]]:
    """cell id -> files, from ``folder/wheels-<id>/...`` (download-artifact without merging).
    A missing folder means no cell job uploaded anything: every cell failed."""
    out: dict[str, list[Path]] = {}
    if not folder.is_dir():
        return out
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and sub.name.startswith(ARTIFACT_PREFIX):
            out[sub.name[len(ARTIFACT_PREFIX):]] = [p for p in sorted(sub.rglob("*")) if p.is_file()]
    return out


def gather(outcome: WaveOutcome, dist: Path) -> list[Path]:
    """Copy the built cells' wheels and ledger fragments into ``dist`` (what ``farm upload``
    takes); the files of failed cells (a partial wheelhouse) stay out."""
    dist.mkdir(parents=True, exist_ok=True)
    copied = []
    for cell in outcome.built:
        for src in cell.files:
            if src.name.endswith((".whl", FRAGMENT_SUFFIX)):
                dest = dist / src.name
                if dest.exists():
                    raise UsageError(f"{src.name} comes from two cells (the second is {cell.id})",
                                     hint="each cell builds its own wheel names; check the build matrix")
                shutil.copy2(src, dest)
                copied.append(dest)
    return copied


def summary(outcome: WaveOutcome) -> str:
    """Markdown for ``$GITHUB_STEP_SUMMARY``: the counts, then every failed cell by package."""
    counts = (f"{len(outcome.built)} cell(s) built, {len(outcome.failed)} failed, "
              f"{outcome.deferred} deferred to the next run")
    lines = ["## farm wave", "", counts, ""]
    if outcome.publish:
        lines.append("The built cells' wheels are published; failed cells stay in the queue.")
    else:
        lines.append("**Nothing was built: nothing is published and no next wave starts.**")
    if outcome.next_wave:
        lines.append("The next wave starts after this run has recorded the ledger.")
    failed = outcome.failed_by_package()
    if failed:
        lines += ["", "### Failed cells", "", "| package | failed | cells |", "|---|---|---|"]
        for package, ids in sorted(failed.items()):
            shown = ", ".join(ids[:20]) + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")
            lines.append(f"| {package} | {len(ids)} | {shown} |")
    return "\n".join(lines) + "\n"


def github_outputs(outcome: WaveOutcome) -> dict[str, str]:
    return {
        "publish": str(outcome.publish).lower(),
        "next_wave": str(outcome.next_wave).lower(),
        "built": str(len(outcome.built)),
        "failed": str(len(outcome.failed)),
        "deferred": str(outcome.deferred),
    }
