"""The farm side of compile sharding (the launcher is :mod:`farm.build.shard`): set up a cell's
shard folder before the build, and decide afterwards whether a compile job or a link job did its part.

A cell's shard folder (``--shard-dir``/<cell id>/)::

    bin/farm-nvcc          the launcher (a copy of farm/build/shard.py)
    shard.json             this job: compile shard i of N, or link; the TU -> shard table
    objects/<i>-<key>.o    the objects compile shard i made (the CI artifact of that job)
    objects/done-<i>.json  compile shard i finished: its TUs, the table it used
    log/<job>.jsonl        what the launcher did with each nvcc call of this job

How a compile job ends: it passes when the package's build ran to its end and every TU it owned
compiled (its wheel, made of empty stand-ins for the other shards' TUs, is thrown away); then it
writes ``done-<i>.json``. A build failure fails the job, naming the TUs of this shard that failed.
The link job refuses to start unless every shard's ``done-<i>.json`` is there and was made from the
same TU table (the same source); afterwards it fails closed on a TU no shard made (naming the TU and
the shard that owns it) and on objects the shards made that its build never asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.build import shard
from farm.build.shard import ShardJob
from farm.errors import DefectError, ToolError, UsageError
from farm.fsutil import atomic_write

# Where the cell's shard folder appears inside cibuildwheel's container (bind-mounted, read-write).
CONTAINER_SHARD_DIR = "/opt/farm/shard"
# cibuildwheel copies the build's working directory (the prepared source root) to /project.
CONTAINER_ROOT = "/project"


def _write(path: Path, text: str) -> None:
    atomic_write(path, [text.encode()], durable=False)


@dataclass(frozen=True)
class ShardSetup:
    job: ShardJob
    cell: str
    directory: Path  # on this host
    table: Mapping[str, int]
    digest: str

    def environment(self, seen_dir: str, root: str, cuda_home: str,
                    cache_bin: str | None = None) -> list[tuple[str, str]]:
        """What the build needs, as it sees the folder: torch's ninja build runs ``$PYTORCH_NVCC``
        (a command: launcher + real nvcc), CMake prepends ``CMAKE_CUDA_COMPILER_LAUNCHER``.
        ``cache_bin``: the compiler cache's launchers (:mod:`farm.build.cclaunch`); the shard
        launcher runs nvcc through them, so what a shard compiles is cached and what the link job
        serves is never compiled."""
        launcher = f"{seen_dir}/{shard.LAUNCHER}"
        nvcc = f"{cache_bin}/nvcc" if cache_bin else f"{cuda_home}/bin/nvcc"
        # CMake runs LAUNCHER;ARGS... NVCC: the shard launcher's "real compiler" is then the cache's
        return [
            ("FARM_SHARD_DIR", seen_dir),
            ("FARM_SHARD_ROOT", root),
            ("PYTORCH_NVCC", f"{launcher} {nvcc}"),
            ("CMAKE_CUDA_COMPILER_LAUNCHER", f"{launcher};{cache_bin}/launch" if cache_bin else launcher),
        ]


def cell_dir(shard_root: Path, cell_id: str) -> Path:
    return Path(shard_root) / cell_id


def prepare(shard_root: Path, job: ShardJob, cell_id: str, source_root: Path) -> ShardSetup:
    """Write the launcher and ``shard.json`` for this job; a compile job starts from an empty
    share of ``objects/`` (its own files only), a link job checks that every shard is there."""
    directory = cell_dir(shard_root, cell_id)
    table = shard.assign(shard.tree_tus(source_root), job.count)
    digest = shard.table_digest(table, job.count)
    setup = ShardSetup(job, cell_id, directory, table, digest)
    objects = directory / shard.OBJECTS
    objects.mkdir(parents=True, exist_ok=True)
    if job.is_link:
        check_shards(setup)
    else:
        for old in objects.glob(f"{job.index}-*.o"):
            old.unlink()
        (objects / shard.done_name(job.index or 0)).unlink(missing_ok=True)
    log = directory / "log" / shard.log_name(job.label)
    log.parent.mkdir(exist_ok=True)  # here, not by the launcher: in a container that would be root's
    log.unlink(missing_ok=True)
    launcher = directory / shard.LAUNCHER
    launcher.parent.mkdir(parents=True, exist_ok=True)
    source = Path(shard.__file__).read_text(encoding="utf-8")
    _write(launcher, "#!/usr/bin/env python3\n" + source)
    launcher.chmod(0o755)
    config = {"cell": cell_id, "mode": "link" if job.is_link else "compile", "index": job.index,
              "count": job.count, "root": str(source_root), "digest": digest, "table": dict(table)}
    _write(directory / shard.CONFIG, json.dumps(config, indent=1) + "\n")
    return setup


MAX_DONE_BYTES = 16 << 20  # a shard's record lists its objects: well under a MB


def _done(setup: ShardSetup, index: int) -> dict[str, Any] | None:
    path = setup.directory / shard.OBJECTS / shard.done_name(index)
    try:
        record = jsonread.load_file(path, MAX_DONE_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable shard record: {exc}",
                         hint="download that compile job's artifact again, or rerun it") from None
    objects = record.get("objects", []) if isinstance(record, dict) else None
    if not (isinstance(objects, list) and all(isinstance(o, str) for o in objects)):
        raise UsageError(f"{path}: not a shard record farm wrote (an object with a list of object files)",
                         hint="download that compile job's artifact again, or rerun it")
    return record


def check_shards(setup: ShardSetup) -> list[dict[str, Any]]:
    """Every compile shard finished, for this cell, from the same source: else a UsageError
    naming the shard (before the link job spends time on a build that cannot succeed)."""
    records = []
    n = setup.job.count
    for i in range(n):
        rec = _done(setup, i)
        where = setup.directory / shard.OBJECTS
        if rec is None:
            raise UsageError(
                f"cell {setup.cell}: compile shard {i}/{n} has no output in {where} "
                f"({shard.done_name(i)} is missing): its job failed, did not run, or its artifact was not downloaded",
                hint=f"rerun `farm build ... --shard {i}/{n}` for this cell, then the link job")
        if rec.get("cell") != setup.cell or rec.get("count") != n or rec.get("digest") != setup.digest:
            raise UsageError(
                f"cell {setup.cell}: compile shard {i}/{n} was made for another build "
                f"(cell {rec.get('cell')}, {rec.get('count')} shards, TU table {str(rec.get('digest'))[:12]}; "
                f"this link job: TU table {setup.digest[:12]}): the jobs built different sources or configs",
                hint="run every compile job and the link job from the same commit")
        records.append(rec)
    return records


def _log(setup: ShardSetup) -> list[dict[str, Any]]:
    path = setup.directory / "log" / shard.log_name(setup.job.label)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def finish_compile(setup: ShardSetup, build_error: Exception | None) -> dict[str, Any]:
    """A compile job's verdict; on success writes ``done-<i>.json`` and returns its record."""
    job = setup.job
    log = _log(setup)
    failed = sorted({r["tu"] for r in log if r["status"] in ("failed", "stub-failed")})
    compiled = sorted({r["tu"] for r in log if r["status"] == "compiled"})
    if build_error is not None:
        what = (f"; nvcc failed on {', '.join(failed)}" if failed else
                f"; the {len(compiled)} TU(s) of this shard that it reached compiled")
        raise ToolError(f"cell {setup.cell}: compile shard {job.label}: the build failed{what}: {build_error}",
                        hint="read the build log above; a failure after compiling may come from a step that "
                             "cannot take the empty stand-in objects of the other shards' TUs")
    if not log:
        raise ToolError(
            f"cell {setup.cell}: compile shard {job.label}: the build compiled no CUDA TU through farm's nvcc launcher",
            hint="the package's build does not run $PYTORCH_NVCC or $CMAKE_CUDA_COMPILER_LAUNCHER: sharding cannot "
                 "split it; remove `sharding` from the recipe")
    record = {"job": "compile", "cell": setup.cell, "index": job.index, "count": job.count, "digest": setup.digest,
              "objects": sorted({r["file"] for r in log if r["status"] == "compiled"}), "tus": compiled,
              "skipped": len({r["tu"] for r in log if r["status"] == "skipped"})}
    _write(setup.directory / shard.OBJECTS / shard.done_name(job.index or 0),
                      json.dumps(record, indent=1) + "\n")
    return record


def finish_link(setup: ShardSetup, build_error: Exception | None) -> dict[str, Any]:
    """The link job's verdict: every object served, every shard's object used."""
    log = _log(setup)
    n = setup.job.count
    missing = sorted({(r["tu"], r["owner"]) for r in log if r["status"] == "missing"})
    if missing:
        listed = "; ".join(f"{tu} (compile shard {owner}/{n})" for tu, owner in missing[:10])
        raise DefectError(
            f"cell {setup.cell}: the link build needed {len(missing)} object(s) no compile shard made: {listed}",
            hint="the compile jobs built something else than the link job (other sources, env or flags): "
                 "rerun the named shards from the same commit")
    if build_error is not None:
        raise ToolError(f"cell {setup.cell}: link job: the build failed: {build_error}",
                        hint="read the build log above")
    served = {r["file"] for r in log if r["status"] == "served"}
    made = {name for rec in check_shards(setup) for name in rec.get("objects", [])}
    unused = sorted(made - served)
    if unused:
        raise DefectError(
            f"cell {setup.cell}: the compile shards made {len(unused)} object(s) the link build never used "
            f"({', '.join(unused[:5])}): the jobs did not build the same thing",
            hint="run every compile job and the link job from the same commit, with the same settings")
    return {"cell": setup.cell, "job": "link", "count": n, "served": len(served)}
