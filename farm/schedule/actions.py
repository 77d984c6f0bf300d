"""GitHub Actions output of a wave: the shard matrices (at most 256 entries each), the link jobs,
the counts, and the step summary table; refused rather than truncated past GitHub's limits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.errors import UsageError
from farm.schedule.jobs import build_entries
from farm.schedule.matrix import PlannedCell, stale_advice
from farm.schedule.waves import Wave, wave_advice

# GitHub Actions runs at most 256 jobs from one matrix.
SHARD_SIZE = 256
# GitHub caps a job's outputs at 1 MB in total; writing more would truncate the matrix silently.
GITHUB_OUTPUT_LIMIT = 1_000_000


def shards(cells: Sequence[PlannedCell], size: int = SHARD_SIZE) -> list[list[PlannedCell]]:
    """Consecutive chunks of at most ``size`` cells; their concatenation is ``cells``."""
    if size < 1:
        raise ValueError("shard size must be >= 1")
    return [list(cells[i:i + size]) for i in range(0, len(cells), size)]


def github_outputs(wave: Wave) -> dict[str, str]:
    """The step outputs: ``shard_count``, ``shards`` (the indices, a JSON list), ``total`` (cells
    scheduled), ``deferred`` (cells left for the next run) and ``deferred_by_package`` (a JSON
    object, packages with deferred cells only), and ``shard_<i>`` (a JSON list of at most 256
    build entries) for each shard.

    Sharded cells (``sharding: N``) are N entries in the build shards and one in ``link``, with
    ``link_count`` (farm/schedule/jobs.py).

    Refuses (rather than truncates) a wave over GitHub's 1 MB of job outputs."""
    entries, links = build_entries(wave.scheduled)
    parts = [entries[i:i + SHARD_SIZE] for i in range(0, len(entries), SHARD_SIZE)]
    if len(links) > SHARD_SIZE:
        raise UsageError(f"the wave has {len(links)} sharded cells: their link jobs exceed one matrix of {SHARD_SIZE}",
                         hint="narrow the matrix (packages, --cuda) or pass a smaller --max-shards")
    out = {
        "shard_count": str(len(parts)),
        "shards": json.dumps(list(range(len(parts)))),
        "total": str(len(wave.scheduled)),
        "deferred": str(len(wave.deferred)),
        "deferred_by_package": json.dumps({k: v[1] for k, v in wave.per_package().items() if v[1]},
                                          separators=(",", ":")),
    }
    for i, part in enumerate(parts):
        out[f"shard_{i}"] = json.dumps(part, separators=(",", ":"))
    out["link_count"] = str(len(links))
    out["link"] = json.dumps(links, separators=(",", ":"))
    size = sum(len(k) + len(v) + 2 for k, v in out.items())
    if size > GITHUB_OUTPUT_LIMIT:
        raise UsageError(
            f"the wave ({len(wave.scheduled)} cells) needs {size:,} bytes of job outputs; "
            f"GitHub keeps at most {GITHUB_OUTPUT_LIMIT:,} and would drop the rest",
            hint="pass --max-shards (the workflow's shard jobs) so a run takes a wave it can hold",
        )
    return out


def _md_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


SUMMARY_COLUMNS = ("declared", "filtered", "recipe", "no_policy", "phantom", "built", "stale", "to_build")
WAVE_COLUMNS = ("scheduled", "deferred")


def step_summary(wave: Wave, lint_note: str) -> str:
    """A Markdown table for ``$GITHUB_STEP_SUMMARY``."""
    matrix = wave.matrix
    lines = ["## farm matrix", "", lint_note, ""]
    if matrix.overwrite:
        lines += ["**--overwrite: the ledger was ignored; built wheels are scheduled again.**", ""]
    columns = (*SUMMARY_COLUMNS, *WAVE_COLUMNS)
    lines.append(_md_row(("package", "version", "epoch", *(c.replace("_", " ") for c in columns))))
    lines.append(_md_row(["---"] * (3 + len(columns))))
    per_package = wave.per_package()
    for pkg in matrix.packages:
        counts = {**pkg.counts(), **dict(zip(WAVE_COLUMNS, per_package[pkg.package], strict=True))}
        lines.append(_md_row((pkg.package, pkg.version, pkg.epoch, *(counts[c] for c in columns))))
    totals = wave.totals()
    lines.append(_md_row(("**total**", "", "", *(f"**{totals[c]}**" for c in columns))))
    lines += ["", *wave_advice(wave), *stale_advice(matrix)]
    return "\n".join(lines).rstrip() + "\n"


def write_github_output(
    wave: Wave,
    output_path: Path,
    summary_path: Path | None,
    lint_note: str,
    *,
    lint_failed: Sequence[str] = (),
) -> dict[str, str]:
    """Append the outputs to ``$GITHUB_OUTPUT`` (all checks first: nothing is written for a
    wave that would be refused) and the table to ``$GITHUB_STEP_SUMMARY``. ``lint_failed``: the
    packages withheld because their lint failed (a JSON list; the workflow ends red on any)."""
    outputs = {**github_outputs(wave), "lint_failed": json.dumps(sorted(lint_failed))}
    text = "".join(f"{k}={v}\n" for k, v in outputs.items())
    with open(output_path, "a", encoding="utf-8") as fh:
        fh.write(text)
    if summary_path is not None:
        with open(summary_path, "a", encoding="utf-8") as fh:
            fh.write(step_summary(wave, lint_note))
    return outputs
