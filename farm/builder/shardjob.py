"""The farm side of compile sharding (the launcher is :mod:`farm.builder.shard`): set up a cell's
shard folder before the build, and decide afterwards whether a compile job or a link job did its part.

A cell's shard folder (``--shard-dir``/<cell id>/)::

    bin/farm-nvcc          the launcher (a copy of farm/builder/shard.py)
    shard.json             this job: compile shard i of N, or link; the TU -> shard table
    objects/<i>-<key>.o    the objects compile shard i made (the CI artifact of that job)
    objects/done-<i>.json  compile shard i finished: the table and build spec it used, and per TU the
                           sha256 of its object, source and in-tree includes, and its nvcc flags
    log/<job>.jsonl        what the launcher did with each nvcc call of this job

How a compile job ends: it passes when the package's build ran to its end and every TU it owned
compiled (its wheel, made of empty stand-ins for the other shards' TUs, is thrown away); then it
writes ``done-<i>.json``. A build failure fails the job, naming the TUs of this shard that failed.
The link job refuses to start unless every shard's ``done-<i>.json`` is there, is a record farm
writes, was made from the same TU table and build spec, and every object and source it names
hashes as recorded (:func:`prove_shards`); during the build the launcher checks each object again as
it serves it (flags, sources, bytes), and recompiles a sample of them uncached (drawn here, as the
compiler cache's recheck draws its own: :func:`farm.builder.cclaunch.sample`), refusing an object
whose bytes a fresh compile does not make: a record that is consistent but whose objects came
from other sources. Afterwards it fails closed on a TU no shard made (naming the
TU and the shard that owns it) and on objects the shards made that its build never asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from farm import jsonread
from farm.builder import cclaunch, shard
from farm.builder.shard import ShardJob
from farm.errors import DefectError, ToolError, UsageError
from farm.fsutil import SHA256_HEX, atomic_write, open_plain, remove
from farm.provenance.shape import ShapeError, UnknownKeyError, decode, encode

# Where the cell's shard folder appears inside cibuildwheel's container (bind-mounted, read-write).
CONTAINER_SHARD_DIR = "/opt/farm/shard"
# cibuildwheel copies the build's working directory (the prepared source root) to /project.
CONTAINER_ROOT = "/project"
# The PATH shim (shard.SHIM): a folder holding only `nvcc`, which runs the launcher with the real
# nvcc. It names no path of this host, so the same file serves the container and the host.
SHIM_TEXT = """#!/bin/sh
# farm's compile-sharding shim: a tool that runs `nvcc` from PATH reaches the launcher
exec "$FARM_SHARD_DIR/bin/farm-nvcc" "$FARM_NVCC_REAL" "$@"
"""


def _write(path: Path, text: str) -> None:
    atomic_write(path, [text.encode()], durable=False)


@dataclass(frozen=True)
class ShardSetup:
    job: ShardJob
    cell: str
    directory: Path  # on this host
    table: Mapping[str, int]
    digest: str  # the TU table's
    spec: str  # the build spec's digest (farm/builder/spec.py)
    # link job: the compile shards' object file -> what it was proven to be made from
    proofs: Mapping[str, Unit] = field(default_factory=dict)

    def environment(self, seen_dir: str, root: str, cuda_home: str,
                    cache_bin: str | None = None) -> list[tuple[str, str]]:
        """What the build needs, as it sees the folder: torch's ninja build runs ``$PYTORCH_NVCC``
        (a command: launcher + real nvcc), CMake prepends ``CMAKE_CUDA_COMPILER_LAUNCHER``, and a
        tool that runs ``nvcc`` from ``PATH`` itself (spconv's ccimport) finds the shim first, which
        hands the call to the launcher with the real nvcc (``$FARM_NVCC_REAL``).
        ``cache_bin``: the compiler cache's launchers (:mod:`farm.builder.cclaunch`); the shard
        launcher (and the shim) run nvcc through them, so what a shard compiles is cached; what
        the link job serves is never compiled, but for its sample, recompiled past the cache."""
        launcher = f"{seen_dir}/{shard.LAUNCHER}"
        nvcc = f"{cache_bin}/nvcc" if cache_bin else f"{cuda_home}/bin/nvcc"
        # CMake runs LAUNCHER;ARGS... NVCC: the shard launcher's "real compiler" is then the cache's
        return [
            ("FARM_SHARD_DIR", seen_dir),
            ("FARM_SHARD_ROOT", root),
            ("PYTORCH_NVCC", f"{launcher} {nvcc}"),
            ("CMAKE_CUDA_COMPILER_LAUNCHER", f"{launcher};{cache_bin}/launch" if cache_bin else launcher),
            ("FARM_NVCC_REAL", nvcc),
            ("PATH", f"{seen_dir}/{shard.SHIM.rsplit('/', 1)[0]}:$PATH"),
        ]


def _install(setup: ShardSetup, source_root: Path, mode: str, **extra: object) -> None:
    """The launcher, the PATH shim, an empty log and ``shard.json`` (``mode``, ``extra``) for the job of ``setup``."""
    directory = setup.directory
    log = directory / "log" / shard.log_name(setup.job.label)
    log.parent.mkdir(parents=True, exist_ok=True)  # here, not by the launcher: in a container that would be root's
    log.unlink(missing_ok=True)
    launcher = "#!/usr/bin/env python3\n" + Path(shard.__file__).read_text(encoding="utf-8")
    for path, text in ((directory / shard.LAUNCHER, launcher), (directory / shard.SHIM, SHIM_TEXT)):
        path.parent.mkdir(parents=True, exist_ok=True)
        _write(path, text)
        path.chmod(0o755)
    config = {"cell": setup.cell, "mode": mode, "index": setup.job.index, "count": setup.job.count,
              "root": str(source_root), "digest": setup.digest, "spec": setup.spec, "table": dict(setup.table),
              "proofs": {name: u.proof() for name, u in setup.proofs.items()}, **extra}
    _write(directory / shard.CONFIG, json.dumps(config, indent=1) + "\n")


def prepare(shard_root: Path, job: ShardJob, cell_id: str, source_root: Path, spec_digest: str) -> ShardSetup:
    """Write the launcher and ``shard.json`` for this job; a compile job starts from an empty
    share of ``objects/`` (its own files only), a link job proves every shard's output first."""
    directory = Path(shard_root) / cell_id
    table = shard.assign(shard.tree_tus(source_root), job.count)
    digest = shard.table_digest(table, job.count)
    setup = ShardSetup(job, cell_id, directory, table, digest, spec_digest)
    objects = directory / shard.OBJECTS
    objects.mkdir(parents=True, exist_ok=True)
    if job.is_link:
        setup = replace(setup, proofs=prove_shards(setup, source_root))
    else:
        for old in objects.glob(f"{job.index}-*.o"):
            old.unlink()
        (objects / shard.done_name(job.index or 0)).unlink(missing_ok=True)
    # recheck: drawn now, after the shards wrote their records: which objects the link build recompiles
    _install(setup, source_root, "link" if job.is_link else "compile",
             recheck=sorted(cclaunch.sample(sorted(setup.proofs))))
    return setup


def prepare_probe(probe_root: Path, cell_id: str, source_root: Path, spec_digest: str) -> ShardSetup:
    """A probe's folder (``<probe_root>/<cell id>/``), emptied: the launcher and a ``shard.json``
    in probe mode. It shares nothing with a sharded build's folders: a probe's objects are never
    a compile shard's."""
    directory = Path(probe_root) / cell_id
    for old in (directory / shard.OBJECTS, directory / shard.CLAIMS):
        remove(old)
    (directory / shard.OBJECTS).mkdir(parents=True)
    table = shard.assign(shard.tree_tus(source_root), 1)
    setup = ShardSetup(ShardJob(1, 0, probe=True), cell_id, directory, table, shard.table_digest(table, 1),
                       spec_digest)
    _install(setup, source_root, "probe")
    return setup


# ------------------------------------------------------------------------------------------------
# done-<i>.json: what a compile shard claims, parsed strictly
# ------------------------------------------------------------------------------------------------
DONE_VERSION: Final = 2
MAX_DONE_BYTES = 64 << 20  # a record of 10,000 TUs with long flag lists stays far below


# The record is defined once, here: farm.provenance.shape writes it and reads it back (types,
# unknown keys); parse_done adds what a type cannot say (hashes, paths inside the tree, counts).
@dataclass(frozen=True)
class Unit:
    """One TU a compile shard compiled: its object and what it was made from."""

    tu: str  # relative to the source root
    object: str  # the build's object file name (basename)
    file: str  # its copy in objects/
    object_sha256: str
    source_sha256: str
    inputs: Mapping[str, str]  # in-tree files the TU includes (nvcc's dependency output) -> sha256
    flags: tuple[str, ...]  # nvcc's argv less source/output, root as $ROOT

    def proof(self) -> dict[str, Any]:
        """What the launcher checks as it serves the object (``shard.json``'s ``proofs``)."""
        return dict(encode(self))


@dataclass(frozen=True, kw_only=True)
class DoneRecord:
    """``done-<i>.json``: compile shard ``index`` of ``count`` finished."""

    version: Literal[2] = DONE_VERSION
    job: Literal["compile"] = "compile"
    cell: str
    index: int
    count: int
    digest: str  # the TU table's
    spec: str  # the build spec's
    units: tuple[Unit, ...]
    skipped: int  # TUs this shard left to the others

    def to_json(self) -> dict[str, Any]:
        return dict(encode(self))


def _relpath(text: str) -> bool:
    parts = text.split("/")
    return bool(text) and not text.startswith("/") and "\\" not in text and all(p not in ("", ".", "..") for p in parts)


def parse_done(data: object, where: Path, index: int, count: int) -> DoneRecord:
    """A ``done-<i>.json`` as :meth:`DoneRecord.to_json` wrote it; anything else is a UsageError
    naming the file and the key."""
    def bad(key: str, what: str) -> UsageError:
        return UsageError(f"{where}: compile shard {index}/{count}'s record is not one farm wrote: {key}: {what}",
                          hint=f"rerun compile shard {index}/{count} and download its artifact again; "
                               "never edit a shard's output")

    if isinstance(data, dict) and (data.get("version"), data.get("job")) != (DONE_VERSION, "compile"):
        raise bad("version", f"must be {DONE_VERSION} with job 'compile' (this farm's shard record), not "
                             f"{data.get('version')!r:.20}: a compile job of another farm version made it")
    try:
        record: DoneRecord = decode(DoneRecord, data)
    except UnknownKeyError as exc:
        raise bad(exc.where or "record", f"holds keys farm does not write ({exc.message})") from None
    except ShapeError as exc:
        raise bad(exc.where or "record", exc.message) from None
    for key in ("index", "count", "skipped"):
        if getattr(record, key) < 0:
            raise bad(key, f"must be a count, not {getattr(record, key)}")
    for k, u in enumerate(record.units):
        if not _relpath(u.tu):
            raise bad(f"units/{k}/tu", f"must be a path inside the source tree, not {u.tu!r:.80}")
        if not u.object or "/" in u.object or "\\" in u.object:
            raise bad(f"units/{k}/object", f"must be an object file name, not {u.object!r:.80}")
        for key in ("object_sha256", "source_sha256"):
            if not SHA256_HEX.fullmatch(getattr(u, key)):
                raise bad(f"units/{k}/{key}", f"must be a sha256 (64 lowercase hex digits), not "
                                              f"{getattr(u, key)!r:.80}")
        for rel, digest in u.inputs.items():
            if not _relpath(rel) or not SHA256_HEX.fullmatch(digest):
                raise bad(f"units/{k}/inputs", f"must map paths in the source tree to sha256s ({rel!r:.80})")
    return record


def _done(setup: ShardSetup, index: int) -> DoneRecord | None:
    path = setup.directory / shard.OBJECTS / shard.done_name(index)
    where = f"compile shard {index}/{setup.job.count}"
    try:
        with open_plain(path) as fh:
            raw = fh.read(MAX_DONE_BYTES + 1)
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as exc:
        if isinstance(exc, ValueError) or path.is_symlink():
            raise UsageError(f"{path}: {where}'s record is not a regular file (a link, FIFO or device)",
                             hint="download that compile job's artifact again") from None
        raise UsageError(f"{path}: cannot read {where}'s record: {getattr(exc, 'strerror', None) or exc}",
                         hint="download that compile job's artifact again, or rerun it") from None
    if len(raw) > MAX_DONE_BYTES:
        raise UsageError(f"{path}: {where}'s record is over {MAX_DONE_BYTES >> 20} MiB: not one farm wrote",
                         hint="download that compile job's artifact again, or rerun it")
    try:
        data = jsonread.loads(raw)  # bounded: UTF-8, depth, number sizes
    except ValueError as exc:
        raise UsageError(f"{path}: {where}'s record is not JSON farm reads: {str(exc)[:200]}",
                         hint="download that compile job's artifact again, or rerun it") from None
    return parse_done(data, path, index, setup.job.count)


def _refuse(setup: ShardSetup, index: int, what: str) -> UsageError:
    n = setup.job.count
    return UsageError(f"cell {setup.cell}: compile shard {index}/{n} {what}",
                      hint=f"rerun `farm build ... --shard {index}/{n}` for this cell from the same commit and "
                           "settings as the link job, then the link job")


def prove_shards(setup: ShardSetup, source_root: Path) -> dict[str, Unit]:
    """Every compile shard finished, for this cell, spec and TU table, and each object it made is
    the one it recorded, compiled from what this tree holds: else a UsageError naming the shard
    and the TU, before the link job spends time on a build that must not be published.
    Returns object file -> its unit, for the launcher to check each one again as it serves it."""
    proofs: dict[str, Unit] = {}
    n = setup.job.count
    where = setup.directory / shard.OBJECTS
    for i in range(n):
        rec = _done(setup, i)
        if rec is None:
            raise UsageError(
                f"cell {setup.cell}: compile shard {i}/{n} has no output in {where} "
                f"({shard.done_name(i)} is missing): its job failed, did not run, or its artifact was not downloaded",
                hint=f"rerun `farm build ... --shard {i}/{n}` for this cell, then the link job")
        if rec.cell != setup.cell or rec.count != n or rec.index != i or rec.digest != setup.digest:
            raise _refuse(setup, i, f"was made for another build (cell {rec.cell}, shard {rec.index}/{rec.count}, "
                                    f"TU table {rec.digest[:12]}; this link job: TU table {setup.digest[:12]}): "
                                    "the jobs built different sources or configs")
        if rec.spec != setup.spec:
            raise _refuse(setup, i, f"was built from another build spec ({rec.spec[:12]}; this link job's: "
                                    f"{setup.spec[:12]}): arch list, toolkit, torch, flags or knobs differ")
        for u in rec.units:
            owner = shard.owner_of(u.tu, setup.table, n)
            if owner != i:
                raise _refuse(setup, i, f"claims TU {u.tu}, which compile shard {owner}/{n} owns")
            if u.file != shard.object_name(i, u.tu, u.object) or u.file in proofs:
                raise _refuse(setup, i, f"records TU {u.tu} under an object name farm did not give it ({u.file!r:.80})")
            path = where / u.file
            have = shard.sha256_of(str(path)) if path.is_file() and not path.is_symlink() else None
            if have != u.object_sha256:
                raise _refuse(setup, i, f"did not leave the object it recorded for TU {u.tu}: {path} is "
                                        + ("missing or not a regular file" if have is None else
                                           f"not the one it compiled (sha256 {have[:12]}, recorded "
                                           f"{u.object_sha256[:12]})"))
            if u.tu in setup.table:  # a generated TU is checked when the build has made it
                differs = shard.verify_unit(u.proof(), str(source_root), missing_ok=True)
                if differs:
                    raise _refuse(setup, i, f"compiled TU {u.tu} from other sources than this tree: {differs}")
            proofs[u.file] = u
    return proofs


def read_log(setup: ShardSetup) -> list[dict[str, Any]]:
    """What the launcher did with each nvcc call of this job, one record per call."""
    path = setup.directory / "log" / shard.log_name(setup.job.label)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def split_log(log: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The launcher log's failed TUs (sorted, once each) and its compiled entries, in log order."""
    failed = sorted({r["tu"] for r in log if r["status"] in ("failed", "stub-failed")})
    return failed, [r for r in log if r["status"] == "compiled"]


def finish_compile(setup: ShardSetup, build_error: Exception | None) -> DoneRecord:
    """A compile job's verdict; on success writes ``done-<i>.json`` and returns its record."""
    job = setup.job
    log = read_log(setup)
    failed, compiled = split_log(log)
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
    unhashed = sorted(r["tu"] for r in compiled if not (r.get("object_sha256") and r.get("source_sha256")))
    if unhashed:
        raise ToolError(f"cell {setup.cell}: compile shard {job.label}: could not hash the object or source of "
                        f"{', '.join(unhashed[:5])}", hint="check the build folder's permissions and free disk")
    units = {r["file"]: Unit(r["tu"], r["object"], r["file"], r["object_sha256"], r["source_sha256"],
                             r["inputs"], tuple(r["flags"])) for r in compiled}
    record = DoneRecord(cell=setup.cell, index=job.index or 0, count=job.count, digest=setup.digest,
                        spec=setup.spec, units=tuple(units[k] for k in sorted(units)),
                        skipped=len({r["tu"] for r in log if r["status"] == "skipped"}))
    _write(setup.directory / shard.OBJECTS / shard.done_name(job.index or 0),
           json.dumps(record.to_json(), indent=1) + "\n")
    return record


def finish_link(setup: ShardSetup, build_error: Exception | None) -> dict[str, Any]:
    """The link job's verdict: every object served after its proof held, every shard's object used."""
    log = read_log(setup)
    n = setup.job.count
    refused = sorted({(r["tu"], r["owner"], r["why"]) for r in log if r["status"] == "refused"})
    if refused:
        listed = "; ".join(f"TU {tu} of compile shard {owner}/{n}: {why}" for tu, owner, why in refused[:5])
        raise UsageError(
            f"cell {setup.cell}: the link build refused {len(refused)} object(s) of the compile shards: {listed}",
            hint="the compile jobs built something else than the link job (other sources, flags or settings), "
                 "or their outputs were altered: rerun the named shards from the same commit and settings, then "
                 "the link job")
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
    rechecked = {r["file"] for r in log if r["status"] == "served" and r.get("rechecked")}
    unused = sorted(set(setup.proofs) - served)
    if unused:
        raise DefectError(
            f"cell {setup.cell}: the compile shards made {len(unused)} object(s) the link build never used "
            f"({', '.join(unused[:5])}): the jobs did not build the same thing",
            hint="run every compile job and the link job from the same commit, with the same settings")
    return {"cell": setup.cell, "job": "link", "count": n, "served": len(served), "rechecked": len(rechecked)}
