"""What the repository's own workflows decide about a drain, read from them (not restated): how many
build shards a run has, how many publish jobs share the token, how long each artifact is kept,
each job's time limit and when the nightly starts a run.

``build.yml`` runs ``farm matrix --max-shards N`` and calls ``build-shard.yml`` once per shard and
once for the link jobs, and ``publish-shard.yml`` after each; ``build-shard.yml`` uploads a compile
shard's objects, each wheel and each ledger fragment with their ``retention-days``;
``publish-shard.yml`` runs ``farm publish-shard [--publishers N]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from farm.errors import UsageError

WORKFLOWS = Path(".github") / "workflows"
_FLAG = r"--{name}[ =](\d+)"


@dataclass(frozen=True)
class Workflow:
    max_shards: int  # build shards a run has (farm matrix --max-shards)
    publishers: int  # farm publish-shard --publishers N (1/N of the token each); 0: shares by the plan's cells
    objects_days: float  # a compile shard's objects
    wheel_days: float  # a wheel and its ledger fragment
    build_timeout_s: float
    publish_timeout_s: float
    nightly: tuple[int, int]  # (hour, minute) UTC of the nightly run
    next_wave_wait_s: float  # how long the next-wave job waits for another run to end (farm chain --wait-for-runs)


def _read(path: Path) -> dict[Any, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read the workflow ({exc})",
                         hint="simulate a farm repository: --root names one with .github/workflows") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), dict):
        raise UsageError(f"{path}: not a workflow (no jobs)")
    return data


def _flag(text: str, name: str, where: str) -> int:
    found = re.search(_FLAG.format(name=re.escape(name)), text)
    if found is None:
        raise UsageError(f"{where}: no --{name} N in its run steps", hint="the simulation reads it from the workflow")
    return int(found.group(1))


def _steps(data: dict[str, Any], job: str, where: str) -> list[dict[str, Any]]:
    steps = (data["jobs"].get(job) or {}).get("steps")
    if not isinstance(steps, list):
        raise UsageError(f"{where}: no job {job!r} with steps")
    return [s for s in steps if isinstance(s, dict)]


def _int(value: object, what: str, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise UsageError(f"{where}: {what} is {value!r}, not a number of days or minutes",
                     hint="the simulation reads literal numbers from the workflow")


def _retention(steps: list[dict[str, Any]], pick: str, where: str) -> int:
    for step in steps:
        w = step.get("with") or {}
        uploads = str(step.get("uses", "")).startswith("actions/upload-artifact")
        if uploads and pick in str(w.get("name", w.get("path"))):
            return _int(w.get("retention-days"), f"retention-days of the {pick} upload", where)
    raise UsageError(f"{where}: no upload-artifact step for {pick!r}")


def read_workflows(root: Path) -> Workflow:
    build_path, shard_path = root / WORKFLOWS / "build.yml", root / WORKFLOWS / "build-shard.yml"
    publish_path = root / WORKFLOWS / "publish-shard.yml"
    build, shard, publish = _read(build_path), _read(shard_path), _read(publish_path)
    build_text, publish_text = build_path.read_text(encoding="utf-8"), publish_path.read_text(encoding="utf-8")
    steps = _steps(shard, "build", str(shard_path))
    on = build.get("on", build.get(True))  # YAML 1.1 reads the key `on` as true
    cron = str(((on or {}).get("schedule") or [{}])[0].get("cron", "")).split()
    nightly = (int(cron[1]), int(cron[0])) if len(cron) == 5 and cron[0].isdigit() and cron[1].isdigit() else (3, 0)
    return Workflow(
        max_shards=_flag(build_text, "max-shards", str(build_path)),
        publishers=_flag(publish_text, "publishers", str(publish_path)) if "--publishers" in publish_text else 0,
        objects_days=_retention(steps, "objects-", str(shard_path)),
        wheel_days=_retention(steps, "wheels-", str(shard_path)),
        build_timeout_s=60 * _int(shard["jobs"]["build"].get("timeout-minutes"), "the build job's timeout-minutes",
                                  str(shard_path)),
        publish_timeout_s=60 * _int((publish["jobs"].get("publish") or {}).get("timeout-minutes"),
                                    "the publish job's timeout-minutes", str(publish_path)),
        nightly=nightly,
        next_wave_wait_s=60 * _flag(build_text, "wait-for-runs", str(build_path)),
    )
