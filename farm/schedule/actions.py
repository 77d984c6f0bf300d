"""GitHub Actions output of a wave: the shard matrices (at most 256 entries each), the link jobs,
the counts, and the step summary table; refused rather than truncated past GitHub's limits.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from farm.errors import UsageError
from farm.schedule.jobs import build_entries
from farm.schedule.matrix import stale_advice
from farm.schedule.slices import SHARD_SIZE, check_outputs
from farm.schedule.waves import Wave, wave_advice


def github_outputs(wave: Wave) -> dict[str, str]:
    """The step outputs, counts only: ``shard_count`` (build shards of <= 256 jobs), ``link_count``
    (link jobs of sharded cells), ``total`` (cells scheduled), ``deferred`` (cells left for the
    next run) and ``deferred_by_package`` (a JSON object, packages with deferred cells only). The
    entries themselves are in the plan artifact: each shard's slice job reads its own
    (farm/schedule/slices.py), so no output grows with the wave.

    Refuses a wave whose link jobs exceed one matrix, and outputs over GitHub's limit."""
    entries, links = build_entries(wave.scheduled)
    if len(links) > SHARD_SIZE:
        raise UsageError(f"the wave has {len(links)} sharded cells: their link jobs exceed one matrix of {SHARD_SIZE}",
                         hint="narrow the matrix (packages, --cuda) or pass a smaller --max-shards")
    out = {
        "shard_count": str(-(-len(entries) // SHARD_SIZE)),
        "total": str(len(wave.scheduled)),
        "deferred": str(len(wave.deferred)),
        "deferred_by_package": json.dumps({k: v[1] for k, v in wave.per_package().items() if v[1]},
                                          separators=(",", ":")),
        "link_count": str(len(links)),
    }
    check_outputs(out, f"the wave ({len(wave.scheduled)} cells)")
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
    columns = (*SUMMARY_COLUMNS, *WAVE_COLUMNS, *(("refused",) if wave.refused else ()))
    lines.append(_md_row(("package", "version", "epoch", *(c.replace("_", " ") for c in columns))))
    lines.append(_md_row(["---"] * (3 + len(columns))))
    per_package, refused = wave.per_package(), wave.refused_by_package()
    for pkg in matrix.packages:
        counts = {**pkg.counts(), **dict(zip(WAVE_COLUMNS, per_package[pkg.package], strict=True)),
                  "refused": refused.get(pkg.package, 0)}
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
