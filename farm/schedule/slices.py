"""A wave's plan, sliced per job: the matrix job passes only shard indices; each shard reads its
own entries from the plan artifact.

GitHub keeps at most 1 MB of outputs per job, counted in UTF-16 code units (a character outside
the Basic Multilingual Plane counts twice), and a matrix takes at most 256 entries. Passing a
whole wave through the matrix job's outputs brushes that limit at the public farm's scale; so the
matrix job writes the plan (``farm matrix --plan``) as an artifact and outputs the shard count,
and the slice job of shard I outputs that shard's <= 256 entries only, measured here in UTF-16
units before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from farm.errors import UsageError

# GitHub Actions runs at most 256 jobs from one matrix.
SHARD_SIZE = 256
# GitHub caps a job's outputs at 1 MB in total, counted in UTF-16 code units.
GITHUB_OUTPUT_LIMIT = 1_000_000
LINK = "link"
# What an entry must carry for the build job (farm/schedule/jobs.py writes them).
ENTRY_KEYS = ("id", "package", "cuda", "torch", "python", "platform", "runner")


def utf16_units(text: str) -> int:
    """What GitHub counts: UTF-16 code units, not characters or bytes."""
    return len(text.encode("utf-16-le")) // 2


def outputs_size(outputs: Mapping[str, str]) -> int:
    """The size GitHub charges for ``outputs`` (names and values, in UTF-16 units)."""
    return sum(utf16_units(k) + utf16_units(v) for k, v in outputs.items())


def check_outputs(outputs: Mapping[str, str], what: str) -> None:
    """Refuse (rather than let GitHub truncate) outputs over the limit."""
    size = outputs_size(outputs)
    if size > GITHUB_OUTPUT_LIMIT:
        raise UsageError(
            f"{what} needs {size:,} UTF-16 units of job outputs; GitHub keeps at most "
            f"{GITHUB_OUTPUT_LIMIT:,} and would drop the rest",
            hint="pass a smaller --max-shards, so a run takes a wave its jobs can hold")


def plan_entries(plan: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(build entries, link entries) of a plan written by ``farm matrix --plan``, checked: each
    entry names a cell the plan schedules and carries what the build job reads."""
    try:
        jobs = plan["matrix"]
        build, link = jobs["build"], jobs["link"]
        scheduled = {str(c["id"]) for c in plan["cells"]}
    except (KeyError, TypeError) as exc:
        raise UsageError(f"not a wave plan ({exc!r} is missing)",
                         hint="pass the plan `farm matrix --plan FILE` wrote in this run") from None
    for where, entries in (("build", build), ("link", link)):
        if not isinstance(entries, list):
            raise UsageError(f"wave plan: matrix.{where} is not a list")
        for n, e in enumerate(entries):
            if not isinstance(e, dict) or any(not isinstance(e.get(k), str) for k in ENTRY_KEYS[:6]):
                raise UsageError(f"wave plan: matrix.{where}[{n}] is not a build entry",
                                 hint=f"each entry carries {', '.join(ENTRY_KEYS)}")
            if e["id"] not in scheduled:
                raise UsageError(f"wave plan: matrix.{where}[{n}] is cell {e['id']}, which the plan "
                                 "does not schedule", hint="the plan was edited or mixed with another run's")
    return build, link


def shard_count(plan: Mapping[str, Any]) -> int:
    build, _ = plan_entries(plan)
    return -(-len(build) // SHARD_SIZE)


def slice_plan(plan: Mapping[str, Any], shard: str) -> list[dict[str, Any]]:
    """Shard ``I``'s build entries (``I`` from 0), or the link entries (``link``)."""
    build, link = plan_entries(plan)
    if shard == LINK:
        if len(link) > SHARD_SIZE:
            raise UsageError(f"the wave has {len(link)} link jobs, over one matrix of {SHARD_SIZE}",
                             hint="pass a smaller --max-shards to farm matrix")
        return link
    try:
        i = int(shard)
    except ValueError:
        raise UsageError(f"--shard {shard!r}: a shard index (0, 1, ...) or {LINK!r}") from None
    count = -(-len(build) // SHARD_SIZE)
    if not 0 <= i < max(count, 1):
        raise UsageError(f"--shard {i}: the plan has {count} shard(s)",
                         hint="the workflow's shard jobs run only while their index is below shard_count")
    return build[i * SHARD_SIZE:(i + 1) * SHARD_SIZE]


def slice_outputs(entries: list[dict[str, Any]]) -> dict[str, str]:
    """The slice job's outputs: its entries and their count, guarded in UTF-16 units."""
    out = {"cells": json.dumps(entries, separators=(",", ":"), ensure_ascii=False), "count": str(len(entries))}
    check_outputs(out, f"a shard of {len(entries)} entries")
    return out
