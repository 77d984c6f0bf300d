"""``farm matrix [PKG...] [filters] [--overwrite] [--github-output]``: the cells still to build."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from farm.builder.compilecache import backend_for
from farm.errors import UsageError
from farm.fsutil import atomic_write
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.config import FarmConfig
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerfiles import ledger_location
from farm.provenance.ledgerline import ExistsKey
from farm.publish.github import capacity_problems
from farm.publish.githubsettings import GithubSettings
from farm.schedule.actions import (
    SUMMARY_COLUMNS,
    WAVE_COLUMNS,
    github_outputs,
    step_summary,
    write_github_output,
)
from farm.schedule.attempts import FAILED_MOST, FAILED_RETRIES, Attempt
from farm.schedule.attempts import read as read_attempts
from farm.schedule.cost import (
    ARTIFACT_RETENTION_DAYS,
    DEFAULT_CONCURRENCY,
    WaveCost,
    cost_matrix,
    drain_model,
    fit_retention,
    plan_wave,
    wave_cost,
)
from farm.schedule.durations import durations_of, recorded_builds
from farm.schedule.hitrate import hit_rates_of
from farm.schedule.jobs import build_entries, cost, job_counts
from farm.schedule.matrix import (
    Filters,
    Matrix,
    PlannedCell,
    compute_matrix,
    stale_advice,
    without_cells,
    without_packages,
)
from farm.schedule.matrixlint import (
    LintOutcome,
    confirm_stale_ignores,
    lint_failures,
    lint_packages,
    stale_ignores,
)
from farm.schedule.recipetimes import recipe_times
from farm.schedule.slices import SHARD_SIZE
from farm.schedule.waves import Wave, deferred_error, wave_advice
from farm.table import format_table

NO_LINT_NOTE = (
    "LINT SKIPPED (--no-lint): arch gates, FP8 code and build-file arch overrides of the "
    "scheduled packages were NOT checked"
)


# What each column of the table means; every declared cell is counted in exactly one of them.
VOCABULARY = """\
the table's columns (each declared cell lands in exactly one, in this order):
  declared    every (CUDA line, torch, Python, platform) cell the grid and the recipe's list give
  filtered    left out by this command's filters (PKG, --cuda, --torch, --python, --platform)
  recipe      left out by the recipe itself (min_torch, only: ...)
  no policy   the platform's arch policy has no row for that CUDA line (_defaults.yml arch_policy)
  phantom     a (CUDA, torch, Python, platform) combination upstream PyTorch never shipped
  built       in the ledger at the current build_epoch: not built again (--overwrite does)
  stale       built at the current epoch with another arch list than the config gives today:
              reported with the advice to bump build_epoch, never rebuilt silently
  to build    the rest; scheduled and deferred split it into this run and later runs
see docs/maintainers.md, "Reading the matrix"
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = VOCABULARY
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("packages", nargs="*", metavar="PKG", help="only these packages (default: all)")
    parser.add_argument("--cuda", action="append", metavar="V", help="only this CUDA line, e.g. 12.8 (repeatable)")
    parser.add_argument("--torch", action="append", metavar="V", help="only this torch minor, e.g. 2.8 (repeatable)")
    parser.add_argument("--python", action="append", metavar="V", help="only this Python, e.g. 3.11 (repeatable)")
    parser.add_argument("--platform", action="append", metavar="P",
                        help="only this platform: linux_x86_64, linux_aarch64, win_amd64 (repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="ignore the ledger: schedule built cells again")
    parser.add_argument("--no-lint", action="store_true", help="skip the arch-gate lint (said loudly in the output)")
    parser.add_argument("--github-output", action="store_true",
                        help="write shards of <= 256 cells to $GITHUB_OUTPUT and a table to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--max-shards", type=int, metavar="N",
                        help=f"the number of shard jobs the workflow has: schedule at most N x {SHARD_SIZE} "
                             "cells (round-robin across packages) and defer the rest to the next run")
    parser.add_argument("--fail-on-deferred", action="store_true",
                        help="exit 2 (writing nothing) when --max-shards would defer cells")
    parser.add_argument("--withhold-lint-failures", action="store_true",
                        help="a package whose lint fails is withheld (none of its cells scheduled, listed as "
                             "lint_failed) and the others are scheduled: exit 0; without it a lint failure "
                             "schedules nothing and exits 1")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY, metavar="N",
                        help="jobs GitHub runs at once, for the cost estimate (default: "
                             f"{DEFAULT_CONCURRENCY}, the Free plan; Pro 40, Team 60, Enterprise 500)")
    parser.add_argument("--artifact-retention-days", type=float, default=ARTIFACT_RETENTION_DAYS, metavar="D",
                        help="how long the workflows keep a wave's artifacts (retention-days): a wave is sized so "
                             "that its bill and its last publish job end inside it "
                             f"(default {ARTIFACT_RETENTION_DAYS})")
    parser.add_argument("--retry-failed", action="store_true",
                        help="schedule the cells refused because their builds kept failing (the same job "
                             f"{FAILED_RETRIES + 1} times, or {FAILED_MOST} failures, with an unchanged recipe) once "
                             "more: failures that were the runners', not the recipe's")
    parser.add_argument("--hold", action="append", type=Path, default=[], metavar="PLAN",
                        help="the plan of a run still building or publishing (repeatable): its cells the ledger "
                             "does not record yet are left out, neither scheduled nor deferred (that run builds "
                             "and publishes them; the plan's `held` counts them)")
    parser.add_argument("--warm", action="store_true",
                        help="plan for a warm compiler cache: shard and refuse by the warm time (the recorded hit "
                             "rates, or every compile step a hit where none is recorded)")
    parser.add_argument("--no-time-limit", action="store_true",
                        help="schedule cells whose recorded or estimated time no hosted runner can finish "
                             "(self-hosted runners without GitHub's 6 h job limit)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--ledger", type=Path, help="the ledger folder, or a single-file ledger (default: ROOT/ledger)")
    parser.add_argument("--cache-dir", type=Path, help="sources, lint and ledger-index caches (default: ROOT/.cache)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plan", type=Path, metavar="FILE",
                        help="also write the --json output to FILE (what `farm wave` reads after the builds)")


def release_capacity(config: FarmConfig, ledger: LedgerIndex, matrix: Matrix) -> list[str]:
    """Each GitHub target's releases that the ledger's cells and this matrix's would take past
    GitHub's 1,000 assets (farm.publish.github.capacity_problems), one line each."""
    keys = [r.key for r in ledger.records if r.key is not None]
    keys += [ExistsKey(c.package, c.version, c.cuda, c.torch, c.python, c.platform, p.epoch)
             for p in matrix.cells for c in (p.cell,)]
    return [f"publish target {t.name!r}: {line}" for t in config.defaults.publish.values()
            if isinstance(t, GithubSettings)
            for line in capacity_problems(t.tag, keys)]


def matrix_json(wave: Wave, lint: dict[str, Any], costs: dict[str, Any] | None = None) -> dict[str, Any]:
    """``cells``: the cells this run schedules, longest first; ``deferred_cells``: the ids of
    those left for the next run; ``refused_cells``: those no hosted runner can finish, with the
    reason (``totals.scheduled + totals.deferred + totals.refused == totals.to_build``)."""
    matrix = wave.matrix
    per_package = wave.per_package()
    return {
        "filters": matrix.filters.as_json(),
        "overwrite": matrix.overwrite,
        "build_epoch": matrix.defaults_epoch,
        "lint": lint,
        "totals": wave.totals(),
        "max_jobs": wave.capacity,
        "shard_count": -(-job_counts(wave.scheduled)[0] // SHARD_SIZE),
        "jobs": dict(zip(("build", "link"), job_counts(wave.scheduled), strict=True)),
        "packages": [
            {"package": p.package, "version": p.version, "build_epoch": p.epoch, **p.counts(),
             **dict(zip(WAVE_COLUMNS, per_package[p.package], strict=True)),
             "stale_cells": [s.as_json() for s in p.stale]}
            for p in matrix.packages
        ],
        "cells": cells_json(wave.scheduled),
        "deferred_cells": [p.cell.id for p in wave.deferred],
        "refused_cells": [r.as_json() for r in wave.refused],
        "cost": costs or {},
        # what each shard's slice job hands its build matrix (`farm slice`)
        "matrix": dict(zip(("build", "link"), build_entries(wave.scheduled), strict=True)),
    }


def drain_json(waves: Sequence[WaveCost]) -> dict[str, Any]:
    """The whole queue, drained in waves as the workflow chains them (nothing failing)."""
    return {"waves": len(waves), "jobs": sum(w.jobs for w in waves),
            "runner_hours": round(sum(w.runner_hours for w in waves), 1),
            "wall_hours": round(sum(w.wall_hours for w in waves), 1),
            "concurrency": waves[0].concurrency if waves else DEFAULT_CONCURRENCY}


def drain_line(waves: Sequence[WaveCost]) -> str:
    d = drain_json(waves)
    return (f"the whole queue: {d['waves']} wave(s), {d['jobs']:,} job(s), {d['runner_hours']:,.0f} runner-hours, "
            f"~{d['wall_hours'] / 24:,.1f} days at {d['concurrency']} concurrent jobs")


def cells_json(cells: Sequence[PlannedCell]) -> list[dict[str, Any]]:
    """Each cell's JSON object; an arch list is rendered once per distinct list, not per cell."""
    canonical: dict[ArchList, str] = {}
    out = []
    for p in cells:
        text = canonical.get(p.archs)
        if text is None:
            text = canonical[p.archs] = p.archs.canonical()
        out.append(p.as_json(text))
    return out


def render(wave: Wave) -> str:
    columns = (*SUMMARY_COLUMNS, *WAVE_COLUMNS) if wave.capacity is not None else SUMMARY_COLUMNS
    columns = (*columns, *(("refused",) if wave.refused else ()))
    headers = ("package", "version", "epoch", *(c.replace("_", " ") for c in columns))
    per_package, refused = wave.per_package(), wave.refused_by_package()
    rows: list[tuple[object, ...]] = []
    for p in wave.matrix.packages:
        counts = {**p.counts(), **dict(zip(WAVE_COLUMNS, per_package[p.package], strict=True)),
                  "refused": refused.get(p.package, 0)}
        rows.append((p.package, p.version, p.epoch, *(counts[c] for c in columns)))
    totals = wave.totals()
    rows.append(("total", "", "", *(totals[c] for c in columns)))
    return format_table(headers, rows)


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    config = load_config(root, packages=args.packages or None)
    filters = Filters.parse(config, packages=args.packages, cuda=args.cuda, torch=args.torch,
                            python=args.python, platform=args.platform)
    if args.max_shards is not None and args.max_shards < 1:
        raise UsageError(f"--max-shards must be >= 1, got {args.max_shards}",
                         hint="the number of shard jobs in the workflow (build-0 ... build-N)")
    if args.github_output and not os.environ.get("GITHUB_OUTPUT"):
        raise UsageError("--github-output needs $GITHUB_OUTPUT (GitHub Actions sets it)",
                         hint="run it in a workflow step, or set GITHUB_OUTPUT to a file")
    cache_dir = args.cache_dir or config.root / ".cache"
    ledger_path = args.ledger or ledger_location(config.root)
    # read once: what is built (ignored with --overwrite) and how long each build took
    read = (LedgerIndex.load(ledger_path, cache_dir=cache_dir) if not args.overwrite or ledger_path.exists()
            else LedgerIndex.empty())
    ledger = LedgerIndex.empty() if args.overwrite else read
    matrix = compute_matrix(config, ledger, filters, overwrite=args.overwrite)
    # the cells of runs that still build or publish them (built, not yet in the ledger): never twice
    queued = len(matrix.cells)
    if args.hold:
        # imported here: the plan and artifact readers (and the zip reader behind them) serve --hold only
        from farm.commands.slice import read_plan  # noqa: PLC0415
        from farm.schedule.outcome import plan_cells  # noqa: PLC0415

        matrix = without_cells(matrix, {cid for path in args.hold for cid, _ in plan_cells(read_plan(path))[0]})
    held_count = queued - len(matrix.cells)
    if not 1 <= args.artifact_retention_days <= 90:
        raise UsageError(f"--artifact-retention-days {args.artifact_retention_days}: GitHub keeps artifacts 1 "
                         "to 90 days")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be >= 1, got {args.concurrency}",
                         hint="the jobs your GitHub plan runs at once (Free 20, Pro 40, Team 60)")
    # each cell's jobs planned by its recorded (or estimated) duration; a sharded cell costs its
    # N compile jobs + 1 link job (farm/schedule/jobs.py)
    recorded = list(recorded_builds(read))
    # where the ledger has nothing of a package: its recipe's build measured on the reference host,
    # scaled to a hosted runner by the factor the table states
    times = recipe_times()
    durations = replace(durations_of(recorded), measured=times, runner_factor=times.runner_factor.value)
    sharding = {name: config.recipe(name).sharding for name in (p.package for p in matrix.packages)}
    # the compiler cache's, per package; all of a recorded cell where the cache keeps its steps
    hit_rates = hit_rates_of(recorded, retained=backend_for(os.environ) != "gha")

    def unchanged(attempt: Attempt) -> bool:
        """A failed build's recipe and defaults are today's: it would fail the same way."""
        return not args.retry_failed and (attempt.recipe_sha256, attempt.defaults_sha256) == (
            config.recipe(attempt.package).sha256, config.defaults.sha256)

    costed = cost_matrix(matrix, sharding, durations, time_limit=not args.no_time_limit, hit_rates=hit_rates,
                         attempts=read_attempts(ledger_path), unchanged=unchanged, warm=args.warm)
    most = capacity = args.max_shards * SHARD_SIZE if args.max_shards is not None else None
    if capacity is not None:  # a wave whose artifacts would expire before it is published is made smaller
        capacity = fit_retention(costed, capacity, args.concurrency, retention_days=args.artifact_retention_days)
    wave = plan_wave(costed, capacity)
    if args.fail_on_deferred and wave.deferred:
        raise deferred_error(wave)
    if args.github_output:
        github_outputs(wave)  # refuse an oversized wave before anything
    if args.github_output or args.plan:
        # a release that would pass 1,000 assets refuses the upload of every wheel past it: say so now
        full = release_capacity(config, ledger, matrix)
        if full:
            raise UsageError("; ".join(full[:5]) + (f"; and {len(full) - 5} more" if len(full) > 5 else ""),
                             hint="put more of the cell into the target's `tag` in _defaults.yml (the default "
                                  "names package, version, CUDA line and epoch), then run the matrix again")

    outcomes: list[LintOutcome] = []
    failed: list[LintOutcome] = []
    withheld: list[str] = []
    if args.no_lint:
        lint_note = NO_LINT_NOTE
        lint: dict[str, Any] = {"ran": False, "note": NO_LINT_NOTE, "results": []}
    else:
        outcomes = confirm_stale_ignores(config, lint_packages(config, matrix, cache_dir), cache_dir)
        failed = list(lint_failures(outcomes))
        linted = {o.package for o in outcomes}
        lint_note = (f"lint: FAILED for {', '.join(sorted({o.package for o in failed}))}" if failed
                     else f"lint: passed ({len(linted)} package(s), {len(outcomes)} arch list(s))")
        if failed and args.withhold_lint_failures:
            # One package's findings must not stop the farm: its cells wait, the others build.
            withheld = sorted({o.package for o in failed})
            matrix = without_packages(matrix, withheld)
            costed = replace(costed, matrix=without_packages(costed.matrix, withheld),
                             refused=tuple(r for r in costed.refused if r.cell.cell.package not in withheld))
            wave = replace(plan_wave(costed, capacity), matrix=matrix)
            if args.github_output:
                github_outputs(wave)
            lint_note += " (withheld: none of their cells is scheduled)"
        lint = {"ran": True, "note": lint_note, "passed": not failed, "withheld": withheld,
                "results": [{"package": o.package, "arch_list": o.arch_list, **o.report.to_json()}
                            for o in outcomes]}

    wave = replace(wave, matrix=matrix)  # the buckets of every package, refused cells included
    this_wave = wave_cost([costed.plan_of(p) for p in wave.scheduled], args.concurrency)
    drain = drain_model(costed, capacity or max(1, sum(cost(p) for p in costed.matrix.cells)), args.concurrency,
                        retention_days=args.artifact_retention_days if capacity is not None else None)
    retention = {"days": args.artifact_retention_days, "capacity": capacity, "reduced_from": most}
    costs = {"wave": this_wave.to_json(), "drain": drain_json(drain), "retention": retention}
    if args.json or args.plan:
        encoded = msgspec.json.encode({**matrix_json(wave, lint, costs), "held": held_count})
        if args.plan and (withheld or not failed):
            atomic_write(args.plan, [encoded, b"\n"])
    if args.json:
        print(encoded.decode())
        if args.no_lint:
            print(f"farm matrix: {NO_LINT_NOTE}", file=sys.stderr)
    else:
        if args.no_lint:
            print(f"!! {NO_LINT_NOTE} !!")
        if args.overwrite:
            print("!! --overwrite: the ledger was ignored; built wheels are scheduled again !!")
        print(render(wave))
        for line in (*wave_advice(wave), *stale_advice(matrix)):
            print(line)
        n_build, n_link = job_counts(wave.scheduled)
        split = f" ({n_build} build job(s), {n_link} link job(s): compile sharding)" if n_link else ""
        deferred = f", {len(wave.deferred)} deferred to the next run" if wave.deferred else ""
        print(f"{len(wave.scheduled)} cell(s) scheduled in {-(-n_build // SHARD_SIZE)} shard(s) "
              f"of <= {SHARD_SIZE}{split}{deferred}")
        print(f"this wave's {this_wave.line()}")
        if capacity != most:
            print(f"the wave takes {capacity} of {most} jobs: with more, its artifacts (kept "
                  f"{args.artifact_retention_days:g} days) would expire before its last publish job ends")
        if len(drain) > 1:
            print(drain_line(drain))
        if not args.no_lint:
            print(lint_note)
        for o in failed:
            print(f"\n{o.package} with arch list {o.arch_list}:")
            print(o.report.render())
        for package, ignore in stale_ignores(outcomes):
            print(f"{ignore.where}: lint_ignore {ignore.rule} {ignore.path!r} of {package} matches nothing "
                  "under any of its arch lists: remove it")

    summary = os.environ.get("GITHUB_STEP_SUMMARY") if args.github_output else None
    if failed:  # withheld or not, the findings are to fix
        print(f"farm matrix: {lint_note}; fix the findings (declare the arch, or a reviewed lint_ignore)",
              file=sys.stderr)
    if failed and not withheld:
        if summary:  # the run page says why no build ran; no matrix is output
            with open(summary, "a", encoding="utf-8") as fh:
                fh.write(step_summary(wave, f"**{lint_note}**: no cells were scheduled"))
        return 1
    if args.github_output:
        write_github_output(wave, Path(os.environ["GITHUB_OUTPUT"]), Path(summary) if summary else None,
                            f"**{lint_note}**" if args.no_lint or withheld else lint_note,
                            lint_failed=withheld)
    return 0
