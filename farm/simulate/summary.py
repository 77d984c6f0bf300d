"""What a simulated drain reports, and the goals it is held to (pure).

The goals of an epoch bump of the repository's grid on GitHub: nothing lost (every cell the
planner does not refuse is published), nothing rebuilt because of a limit (a publish job's clock,
an artifact's retention, the ledger's file size, the REST limits), a cold bump drained in at most
12 days at 60 concurrent jobs (GitHub's Team plan) and a warm one (the compiler cache full,
nothing else changed) in at most 3.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from farm.simulate.drain import Drain, EpochResult
from farm.table import format_table

GOAL_RUNNERS = 60
COLD_DAYS = 12.0
WARM_DAYS = 3.0
LIMIT_CAUSES = ("publish killed", "artifact expired", "ledger refused", "rate limit")
MIB = 2**20


@dataclass(frozen=True)
class Goal:
    what: str
    met: bool | None  # None: not this scenario's question
    value: str


def _reported(drain: Drain) -> list[EpochResult]:
    """The bumps the scenario asks about (a warm scenario's cold bump before them is left out)."""
    return drain.results[1:] if drain.scenario.warm else drain.results


def goals(drain: Drain) -> list[Goal]:
    bumps = _reported(drain)
    lost = sum(r.lost for r in bumps)
    rebuilt = sum(r.rebuilt[c] for r in bumps for c in LIMIT_CAUSES)
    out = [Goal("nothing lost: every cell the planner does not refuse is published", lost == 0, f"{lost} lost"),
           Goal("nothing rebuilt because of a limit (publish clock, retention, ledger size, REST limits)",
                rebuilt == 0, f"{rebuilt} rebuilt")]
    at_goal = drain.scenario.runners == GOAL_RUNNERS
    for warm, limit in ((False, COLD_DAYS), (True, WARM_DAYS)):
        mine = [r for r in bumps if r.warm == warm]
        what = f"a {'warm' if warm else 'cold'} bump in <= {limit:g} days at {GOAL_RUNNERS} runners"
        if not mine or not at_goal:
            out.append(Goal(what, None, "not this scenario (farm simulate --runners 60"
                                         f"{' --warm' if warm else ''})"))
        else:
            worst = max(r.days for r in mine)
            out.append(Goal(what, worst <= limit and all(r.drained for r in mine), f"{worst:.2f} days"))
    return out


def to_json(drain: Drain) -> dict[str, Any]:
    bumps = _reported(drain)
    wasted: Counter[str] = Counter()
    rebuilt: Counter[str] = Counter()
    for r in bumps:
        wasted.update(r.wasted_hours)
        rebuilt.update(r.rebuilt)
    published = sum(r.published for r in drain.results)
    bases = Counter(row.basis for p in drain.matrix.packages if (row := drain.times.recipes.get(p.package)) is not None)
    return {
        "runners": drain.scenario.runners,
        "epochs": drain.scenario.epochs,
        "warm": drain.scenario.warm,
        "compile_cache": drain.scenario.compile_cache,
        "days": round(max(r.days for r in bumps), 2),
        "drained": all(r.drained for r in bumps),
        "runner_hours": round(sum(r.runner_hours for r in bumps), 1),
        "wasted_runner_hours": round(sum(wasted.values()), 1),
        "wasted_by_cause": {k: round(v, 1) for k, v in sorted(wasted.items()) if v},
        "rebuilt_cells": sum(rebuilt.values()),
        "rebuilt_by_cause": dict(sorted(rebuilt.items())),
        "lost_cells": sum(r.lost for r in bumps),
        "lost_failing": sum(r.failed_out for r in bumps),  # refused by the retry policy
        "refused_cells": bumps[-1].refused,
        "published": sum(r.published for r in bumps),
        "requests_per_asset": round(drain.requests / published, 2) if published else None,
        "rate_limit_answers": drain.rate_limited,
        "jobs_killed": sum(r.timeouts for r in bumps),
        "publish_jobs_killed": sum(r.publish_jobs_killed for r in bumps),
        "ledger_largest_file_mb": round(drain.ledger.largest_file() / MIB, 1),
        "busiest_minute_writes": drain.rest.busiest(60, content=True),
        "busiest_hour_requests": drain.rest.busiest(3600),
        "busiest_hour_writes": drain.rest.busiest(3600, content=True),
        "goals": [{"goal": g.what, "met": g.met, "value": g.value} for g in goals(drain)],
        "bumps": [{"epoch": r.epoch, "warm": r.warm, "reported": r in bumps, "days": round(r.days, 2),
                   "drained": r.drained, "runs": r.runs, "runner_hours": round(r.runner_hours, 1),
                   "runner_hours_by_kind": {k: round(v, 1) for k, v in sorted(r.runner_hours_by_kind.items())},
                   "wasted_runner_hours": round(sum(r.wasted_hours.values()), 1), "cells": r.cells,
                   "published": r.published, "refused": r.refused, "lost": r.lost,
                   "rebuilt": sum(r.rebuilt.values()), "jobs_killed": r.timeouts,
                   "planned": {"runner_hours": round(r.planned_runner_hours, 1), "days": round(r.planned_days, 2)}}
                  for r in drain.results],
        "inputs": {name: {"value": i.value, "basis": i.basis} for name, i in _figures(drain).items()},
        "recipe_times": {"measured": bases["measured"], "probe": bases["probe"],
                         "estimate": len(drain.matrix.packages) - bases["measured"] - bases["probe"]},
    }


def render(drain: Drain) -> str:
    data = to_json(drain)
    rows = [(b["epoch"], "warm" if b["warm"] else "cold", f"{b['days']:.1f}", b["runs"], f"{b['runner_hours']:,.0f}",
             f"{b['wasted_runner_hours']:,.0f}", b["cells"], b["published"], b["rebuilt"], b["lost"], b["refused"],
             f"{b['planned']['days']:.1f} / {b['planned']['runner_hours']:,.0f}")
            for b in data["bumps"]]
    lines = [(f"an epoch bump of {drain.matrix.totals()['to_build']:,} cells on GitHub at {data['runners']} concurrent "
             f"jobs, the compiler cache in {'an S3 store' if data['compile_cache'] == 's3' else 'the Actions cache'}:"),
             format_table(("bump", "cache", "days", "runs", "runner-h", "wasted-h", "cells", "published", "rebuilt",
                           "lost", "refused", "planner's days / runner-h"), rows), ""]
    lines.append(f"wasted runner-hours by cause: {_pairs(data['wasted_by_cause']) or 'none'}")
    lines.append(f"rebuilt cells by cause: {_pairs(data['rebuilt_by_cause']) or 'none'}")
    if data["lost_cells"]:
        lines.append(f"lost cells: {data['lost_cells']}, {data['lost_failing']} of them refused because their builds "
                     "kept failing (the retry policy: docs/ci.md)")
    lines.append(f"jobs killed at their limit: {data['jobs_killed']} ({data['publish_jobs_killed']} publish jobs)")
    lines.append(f"REST: {data['requests_per_asset']} requests per published asset; the busiest minute "
                 f"{data['busiest_minute_writes']} content-creating, the busiest hour {data['busiest_hour_requests']} "
                 f"requests ({data['busiest_hour_writes']} content-creating); {data['rate_limit_answers']} rate-limit "
                 "answers waited out")
    lines.append(f"the ledger's largest file after {len(drain.results)} bump(s): {data['ledger_largest_file_mb']} MiB "
                 "(GitHub warns over 50, refuses a push over 100)")
    lines.append("")
    lines.append("goals:")
    for g in goals(drain):
        mark = "n/a " if g.met is None else "met " if g.met else "MISSED"
        lines.append(f"  [{mark}] {g.what}: {g.value}")
    rt = data["recipe_times"]
    figures = _figures(drain)
    measured = [n for n, i in figures.items() if i.basis == "measured"]
    lines.append("")
    lines.append(f"inputs: recipe build times {rt['measured']} measured, {rt['probe']} from probes, {rt['estimate']} "
                 f"estimated; of the job costs, {', '.join(measured) or 'none'} measured, the other "
                 f"{len(figures) - len(measured)} estimated (--json lists them)")
    return "\n".join(lines)


def _figures(drain: Drain) -> dict[str, Any]:
    """Every input with its basis: the recipe table's (runner factor, a build's fixed part) and the
    simulation's own."""
    times = drain.times
    return {"runner_factor": times.runner_factor, **times.fixed, **drain.inputs.table}


def _pairs(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())
