"""``farm build PKG [filters] [--builder cibuildwheel|native] [--out DIR]``: build, then postbuild.

Builds the matrix's cells for PKG (cells the ledger already holds at the current epoch are
skipped unless ``--overwrite``). Every wheel goes through postbuild: only wheels that pass the
assertion reach ``--out``, stamped, with their ledger fragments. Exit 1 when a wheel fails the
assertion, 3 when a build cannot run; 130 / 143 when SIGINT / SIGTERM stopped it (the build's
processes and its compiler cache's server are stopped first, and one line names them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

from farm import DISTRIBUTION, cacheseal
from farm.builder import procs
from farm.builder.builders import (
    ENGINES,
    BuilderKind,
    BuildResult,
    BuildSettings,
    CellPlan,
    build_cell,
    check_engine,
    plan_cell,
    spec_overrides,
)
from farm.builder.compilecache import BACKEND_ENV, BACKENDS
from farm.builder.compilecache import resolve as resolve_compile_cache
from farm.builder.interpreters import Interpreter
from farm.builder.preflight import Preflight, needs_of
from farm.builder.shard import ShardJob
from farm.builder.spec import resolve_spec
from farm.errors import EXIT_DEFECT, EXIT_OK, FarmError, ToolError, UsageError
from farm.fsutil import mark_cache
from farm.load.defaults import check_torch_index
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.model.cells import Cell, local_version
from farm.model.config import FarmConfig, Recipe
from farm.provenance.buildinfo import read_wheel
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from farm.schedule.matrix import Filters, PlannedCell, compute_matrix, stale_advice


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("package", metavar="PKG", help="the package to build")
    parser.add_argument("--cuda", action="append", metavar="V", help="only this CUDA line (repeatable)")
    parser.add_argument("--torch", action="append", metavar="V", help="only this torch minor (repeatable)")
    parser.add_argument("--python", action="append", metavar="V", help="only this Python, e.g. 3.11 (repeatable)")
    parser.add_argument("--platform", action="append", metavar="P", help="only this platform (repeatable)")
    parser.add_argument("--builder", choices=[b.value for b in BuilderKind], default=BuilderKind.CIBUILDWHEEL.value,
                        help="cibuildwheel (container for Linux) or native (this host, no container)")
    parser.add_argument("--engine", choices=ENGINES, default=os.environ.get("FARM_CONTAINER_ENGINE", "docker"),
                        help="cibuildwheel's container engine (default: $FARM_CONTAINER_ENGINE or docker)")
    parser.add_argument("--image", default=os.environ.get("FARM_MANYLINUX_IMAGE"),
                        help="manylinux image for x86_64 cells (default: $FARM_MANYLINUX_IMAGE or cibuildwheel's)")
    parser.add_argument("--image-aarch64", default=os.environ.get("FARM_MANYLINUX_AARCH64_IMAGE"),
                        help="manylinux image for aarch64 cells "
                             "(default: $FARM_MANYLINUX_AARCH64_IMAGE or cibuildwheel's)")
    parser.add_argument("--cuda-home", type=Path, metavar="DIR",
                        help="build with this installed toolkit instead of an assembled one (host builds)")
    parser.add_argument("--toolkit-source", choices=("redist", "pypi"),
                        help="where the assembled toolkit comes from (default: the line's pin in _defaults.yml)")
    parser.add_argument("--redist-url", metavar="URL",
                        help="NVIDIA's redist root or a mirror (default: $FARM_CUDA_REDIST_URL, else _defaults.yml's)")
    parser.add_argument("--torch-index", default=os.environ.get("FARM_TORCH_INDEX"), metavar="URL|pip",
                        help="where torch comes from: a PEP 503 index URL ({cu} becomes cu130), or 'pip' for "
                             "pip's own configured indexes (default: $FARM_TORCH_INDEX, else _defaults.yml's "
                             "torch_index of the cell's CUDA line)")
    parser.add_argument("--pip-cache", type=Path, default=os.environ.get("FARM_PIP_CACHE") or None, metavar="DIR",
                        help="pip's download cache (torch, build tools) for the build, mounted into the Linux "
                             "container (default: $FARM_PIP_CACHE; none: pip's own, inside the container)")
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"), help="asserted wheels go here")
    parser.add_argument("--overwrite", action="store_true", help="build cells the ledger already holds")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--cache-dir", type=Path, help="sources, toolkits, build folders (default: ROOT/.cache)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--plan", action="store_true",
                        help="show each selected cell's build as planned (source patched for its platform, the "
                             "environment, the MSVC set-up of a win_amd64 cell, the cibuildwheel call; with "
                             "--builder native the interpreter, build environment and build command the native "
                             "builder runs) and stop: nothing is compiled or downloaded but the source, on any host")
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--shard", metavar="I/N", help="a recipe with `sharding: N`: compile only shard I of N "
                       "(0-based) into --shard-dir; no wheel (docs/sharding.md)")
    split.add_argument("--link", action="store_true", help="a recipe with `sharding: N`: make the wheel from the "
                       "N compile shards' objects in --shard-dir, then postbuild it")
    split.add_argument("--probe", action="store_true", help="prove a cell's wiring without building it whole: "
                       "the real chain, with only the first TU of each extension compiled and checked against the "
                       "cell's list; no wheel, no ledger entry (docs/probe.md)")
    parser.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                        help="compile without the compiler cache (sccache; on by default, docs/compile-cache.md)")
    parser.add_argument("--compile-cache-backend", choices=BACKENDS, metavar="|".join(BACKENDS),
                        help=f"where compiles are cached: local (CACHE/compile-cache), gha (GitHub Actions' cache), "
                             f"s3 (an S3-compatible store, $SCCACHE_BUCKET...) (default: ${BACKEND_ENV}, else s3 where "
                             "$SCCACHE_BUCKET is set, else gha in a GitHub job that hands its cache to the build, "
                             "else local)")
    parser.add_argument("--shard-dir", type=Path, metavar="DIR",
                        help="compile shards' objects, one folder per cell (default: CACHE/shards)")


def step_summary(results: list[BuildResult], errors: list[tuple[str, FarmError]]) -> str:
    """A Markdown table for the GitHub Actions step summary: one row per cell."""
    rows = ["| cell | result | wheel | compile cache |", "|---|---|---|---|"]
    for r in results:
        c = r.compile_cache
        cache = f"{sum(c.hits.values())}/{c.compiles} hits, {c.nvcc_run} nvcc steps run" if c else "-"
        failed_imports = {c.wheel for c in r.imports if not c.passed}
        if r.probe is not None:
            rows.append(f"| {r.cell.id} | probe {'passed' if r.probe.passed else 'FAILED'} | (no wheel) | {cache} |")
        for pb in r.postbuild:
            wheel = pb.stamped.path.name if pb.stamped else pb.wheel.name
            verdict = ("FAILED the assertion" if not pb.passed else
                       "FAILED the import check" if pb.stamped and pb.stamped.path in failed_imports else "asserted")
            rows.append(f"| {r.cell.id} | {verdict} | {wheel} | {cache} |")
    for cell, exc in errors:
        rows.append(f"| {cell} | error: {exc.message.splitlines()[0]} | - | - |")
    return "\n".join(["### farm build", "", *rows, ""]) + "\n"


def already_built(out_dir: Path, config: FarmConfig, recipe: Recipe, cell: Cell,
                  archs: ArchList) -> tuple[Path, bool] | None:
    """The cell's stamped wheel in ``out_dir`` (at this epoch), and whether it was built from this
    configuration (same recipe and _defaults.yml bytes, same list); None when there is none."""
    if not out_dir.is_dir():
        return None
    label = f"+{local_version(cell)}"
    epoch = config.effective_epoch(recipe)
    found = None
    for wheel in sorted(out_dir.glob("*.whl")):
        if label not in wheel.name:
            continue
        try:
            info = read_wheel(wheel)
        except FarmError:
            continue
        if not (info and info.package == recipe.name and info.cell.to_dict() == cell.as_dict()
                and info.build_epoch == epoch):
            continue
        same = (info.arch_list.normalised == archs.canonical()
                and info.recipe_sha256 == recipe.sha256
                and info.defaults_sha256 == config.defaults.sha256
                and info.provenance == "asserted"
                and Path(f"{wheel}{FRAGMENT_SUFFIX}").is_file())
        if same:
            return wheel, True
        found = (wheel, False)
    return found


def _native_defaults(args: argparse.Namespace) -> None:
    """Without --python/--platform the native builder builds this Python's cells for this
    platform (any other Python of the grid when --python names it)."""
    if args.builder != BuilderKind.NATIVE.value:
        return
    if not args.python:
        args.python = [f"{sys.version_info.major}.{sys.version_info.minor}"]
        print(f"farm build: --builder native: building the cells of this Python ({args.python[0]})", file=sys.stderr)
    if not args.platform and sys.platform.startswith("linux"):
        args.platform = [f"linux_{os.uname().machine}"]
        print(f"farm build: --builder native: building the cells of this platform ({args.platform[0]})",
              file=sys.stderr)


def parse_shard(text: str | None) -> ShardJob | None:
    """``--shard I/N`` read once, before anything is planned: an empty or malformed value is a
    usage error, never an unsharded build."""
    if text is None:
        return None
    try:
        return ShardJob.parse(text)
    except ValueError as exc:
        raise UsageError(f"--shard {exc}", hint="--shard I/N, e.g. --shard 0/4 for the first of 4 compile shards") \
            from None


def shard_job(args: argparse.Namespace, recipe: Recipe, cell: Cell) -> ShardJob | None:
    """``--shard I/N`` / ``--link`` for one cell, checked against the recipe's ``sharding``."""
    wanted = parse_shard(args.shard)
    if wanted is None and not args.link:
        return None  # a sharded recipe built in one job: the ordinary build (the same wheel)
    jobs = recipe.sharding.jobs_for(cell.platform) if recipe.sharding else 1
    flag = "--link" if args.link else f"--shard {args.shard}"
    if jobs < 2:
        raise UsageError(f"{flag}: cell {cell.id} is not sharded ({recipe.display} has no `sharding` "
                         f"for {cell.platform})", hint="build it without --shard/--link")
    if wanted is None:
        return ShardJob(jobs)
    if wanted.count != jobs:
        raise UsageError(f"--shard {args.shard}: {recipe.display} splits cell {cell.id} into {jobs} compile shards",
                         hint=f"--shard I/{jobs} with 0 <= I < {jobs}")
    return wanted


# The build extra (pyproject.toml): what `farm build` runs besides farm itself.
BUILD_EXTRA = ("cibuildwheel", "pip", "nvidia-cuda-cuobjdump")


def require_build_extra() -> None:
    """Refuse before planning anything when farm was installed without its build extra (a user's
    light install for `farm doctor`): name the extra, not a module deep in a traceback."""
    missing = []
    for name in BUILD_EXTRA:
        if name == "nvidia-cuda-cuobjdump" and sys.platform == "darwin":
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise ToolError(f"farm build needs the build tooling; not installed: {', '.join(missing)}",
                        where=sys.executable,
                        hint=f"pip install '{DISTRIBUTION}[build]' (the noxfile's sessions install it)")


def named_explicitly(args: argparse.Namespace, recipe: Recipe) -> frozenset[str]:
    """The preflight dimensions the user named on the command line (before any default): a cell
    blocked on one of them is refused (exit 2 or 3), not skipped. Filters on every axis of a cell
    (CI's one job per cell) name all of them."""
    named = {dim for dim, given in (("platform", args.platform), ("python", args.python)) if given}
    if args.cuda and args.python and args.platform and (args.torch or not recipe.links_torch):
        named |= {"platform", "engine", "image", "python", "compiler", "system", "disk", "network"}
    return frozenset(named)


def preflight_cells(planned: list[PlannedCell], config: FarmConfig, recipe: Recipe, settings: BuildSettings,
                    named: frozenset[str]) -> tuple[list[tuple[PlannedCell, Interpreter | None]],
                                                    list[tuple[str, FarmError]], list[tuple[str, str]]]:
    """Each planned cell checked against this host before anything is downloaded: (buildable cells
    with the interpreter found for them, refused cells, skipped cells with the reason)."""
    pre = Preflight(settings.builder.value, engine=settings.engine, check_engine=check_engine,
                    images=settings.images, cache=Path(settings.work_root).parent)
    ok: list[tuple[PlannedCell, Interpreter | None]] = []
    refused: list[tuple[str, FarmError]] = []
    skipped: list[tuple[str, str]] = []
    for pc in planned:
        blocker = pre.check(pc.cell)
        if blocker is None:
            spec = resolve_spec(config, recipe, pc.cell, spec_overrides(settings), arch=pc.arch,
                                torch_version=pc.torch_version)
            needs = needs_of(spec, recipe.source, builder=settings.builder.value,
                             source_cache=Path(settings.source_cache), toolkit_root=Path(settings.toolkit_root),
                             cuda_home=settings.cuda_home,
                             env_root=Path(settings.env_root or Path(settings.work_root).parent / "envs"),
                             interpreter=pre.interpreter(pc.cell), vendor=recipe.vendor)
            blocker = pre.check(pc.cell, downloads=needs.downloads, disk_needed=needs.disk,
                                cache=Path(settings.work_root).parent,
                                system_packages=spec.knobs.system_packages)
        if blocker is None:
            ok.append((pc, pre.interpreter(pc.cell)))
        elif blocker.dimension in named:
            refused.append((pc.cell.id, blocker.error(pc.cell)))
        else:
            skipped.append((pc.cell.id, blocker.reason))
    return ok, refused, skipped


def show_plans(args: argparse.Namespace, config: FarmConfig, recipe: Recipe, planned: list[PlannedCell],
               settings: BuildSettings) -> int:
    """``--plan``: each cell planned, shown, and nothing built (no preflight: a cell this host
    cannot build is planned all the same). A cell that cannot be planned is an error of its own."""
    plans: list[CellPlan] = []
    errors: list[tuple[str, FarmError]] = []
    for pc in planned:
        try:
            plans.append(plan_cell(config, recipe, pc.cell, settings, arch=pc.arch, torch_version=pc.torch_version,
                                   log=lambda m: print(f"farm build: {m}", file=sys.stderr)))
        except FarmError as exc:
            print(f"farm build: {pc.cell.id}: error: {exc}", file=sys.stderr)
            errors.append((pc.cell.id, exc))
    if args.json:
        print(json.dumps({"plans": [p.to_json() for p in plans],
                          "errors": [{"cell": c, "error": str(e), "exit_code": e.exit_code} for c, e in errors]},
                         indent=2))
    else:
        print("\n\n".join(p.render() for p in plans))
    return max((e.exit_code for _, e in errors), default=EXIT_OK)


def run(args: argparse.Namespace) -> int:
    """SIGINT and SIGTERM (a CI runner cancelling the job) stop the build's processes and its
    compiler cache's server before farm exits 130 / 143 (:mod:`farm.builder.procs`)."""
    with procs.interruptible():
        return _build(args)


def _build(args: argparse.Namespace) -> int:
    parse_shard(args.shard)
    procs.stall_limit(os.environ)  # a bad $FARM_STALL_TIMEOUT is refused before anything runs
    if not args.plan:  # the package's code will run here (its build, its wheel's import check)
        cacheseal.refuse_env_key(os.environ, f"the package code of {args.package} (its build or its import check)")
    if args.plan and (args.shard or args.link):
        raise UsageError("--plan shows the whole build of a cell, not one of its compile shards",
                         hint="drop --shard/--link to see the plan")
    require_build_extra()
    config = load_config(args.root, packages=[args.package])
    named = named_explicitly(args, config.recipe(args.package))
    _native_defaults(args)
    filters = Filters.parse(config, packages=[args.package], cuda=args.cuda, torch=args.torch,
                            python=args.python, platform=args.platform)
    # a plan shows a built cell too; a probe makes no wheel, so it runs whether the ledger holds the cell or not
    whole = args.overwrite or args.plan or args.probe
    ledger = (LedgerIndex.empty() if whole
              else LedgerIndex.load(config.ledger_path, cache_dir=args.cache_dir or config.root / ".cache"))
    matrix = compute_matrix(config, ledger, filters, overwrite=whole)
    planned = matrix.cells
    if not planned and matrix.totals()["built"]:
        # Everything these filters select is built already: a rerun is not an error.
        stale = len(matrix.stale)
        message = (f"nothing to build: the {matrix.totals()['built']} selected cell(s) of {args.package} are in "
                   f"the ledger at the current build_epoch"
                   + (f" ({stale} built with another arch list: stale)" if stale else "")
                   + "; --overwrite rebuilds them")
        print(f"farm build: {message}", file=sys.stderr)
        for line in stale_advice(matrix):
            print(f"farm build: {line}", file=sys.stderr)
        if args.json:
            print(json.dumps({"results": [], "errors": [], "nothing_to_build": message}, indent=2))
        return EXIT_OK
    if not planned:
        advice = stale_advice(matrix)
        raise UsageError(f"no cells of {args.package} to build with these filters"
                         + (f" ({len(matrix.stale)} built with another arch list: stale)" if advice else ""),
                         hint=advice[0] if advice else
                         "check the filters with `farm matrix`, or pass --overwrite to rebuild built cells")
    cache = (args.cache_dir or config.root / ".cache").absolute()
    settings = BuildSettings(
        builder=BuilderKind(args.builder), engine=args.engine,
        images={arch: image for arch, image in (("x86_64", args.image), ("aarch64", args.image_aarch64)) if image},
        out_dir=args.out.absolute(), work_root=cache / "build", source_cache=cache / "sources",
        toolkit_root=cache / "toolkit", cuda_home=args.cuda_home, env_root=cache / "envs",
        torch_index=(check_torch_index(args.torch_index, "--torch-index / $FARM_TORCH_INDEX")
                     if args.torch_index else None),
        toolkit_source=args.toolkit_source, redist_url=args.redist_url,
        shard_dir=(args.shard_dir or cache / "shards").absolute(),
        compile_cache=resolve_compile_cache(args.compile_cache, cache / "compile-cache",
                                            backend=args.compile_cache_backend),
        pip_cache=Path(args.pip_cache).absolute() if args.pip_cache else None,
        probe=args.probe,
    )
    recipe = config.recipe(args.package)
    if args.plan:
        return show_plans(args, config, recipe, planned, settings)
    print(f"farm build: compiler cache: {settings.compile_cache.describe()}", file=sys.stderr)
    results: list[BuildResult] = []
    skipped: list[tuple[str, Path]] = []
    out_dir = settings.out_dir
    buildable, errors, cannot = preflight_cells(planned, config, recipe, settings, named)
    for cell_id, why in cannot:
        print(f"farm build: {cell_id}: skipped: this host cannot build it: {why}", file=sys.stderr)
    for cell_id, exc in errors:
        print(f"farm build: {cell_id}: error: {exc}", file=sys.stderr)
    if cannot and not buildable and not errors:
        raise ToolError(f"none of the {len(cannot)} selected cell(s) of {args.package} can be built on this host "
                        f"(first: {cannot[0][0]}: {cannot[0][1]})",
                        hint="filter the cells this host can build (--python, --platform), or build on another host")
    for pc, interpreter in buildable:
        there = None if args.probe else already_built(out_dir, config, recipe, pc.cell, pc.archs)
        if there is not None and not args.overwrite:
            done, same = there
            if not same:  # refused before a build whose stamp would collide with it
                exc = UsageError(f"{done} is this cell's wheel from another configuration (the recipe, "
                                 "_defaults.yml or the arch list changed since)",
                                 hint="pass --overwrite to replace it, or --out another folder")
                print(f"farm build: {pc.cell.id}: error: {exc}", file=sys.stderr)
                errors.append((pc.cell.id, exc))
                continue
            # The quick start twice: the cell's asserted wheel is in --out already, made from this
            # very configuration; a rebuild would only make other bytes under the same name.
            print(f"farm build: {pc.cell.id}: already built: {done} (asserted, same configuration; "
                  "--overwrite rebuilds it)", file=sys.stderr)
            skipped.append((pc.cell.id, done))
            continue
        if there is not None:  # --overwrite: the cell's old wheel and fragment make way
            there[0].unlink()
            Path(f"{there[0]}{FRAGMENT_SUFFIX}").unlink(missing_ok=True)
        mark_cache(cache)  # what farm cache prune takes for a farm cache, once a build writes to it
        try:
            cell_settings = replace(settings, shard=shard_job(args, recipe, pc.cell))
            results.append(build_cell(config, recipe, pc.cell, cell_settings, arch=pc.arch,
                                      torch_version=pc.torch_version, interpreter=interpreter))
        except FarmError as exc:  # one cell's failure does not stop the others
            print(f"farm build: {pc.cell.id}: error: {exc}", file=sys.stderr)
            errors.append((pc.cell.id, exc))
    if args.json:
        print(json.dumps({"results": [r.to_json() for r in results],
                          "already_built": [{"cell": c, "wheel": str(w)} for c, w in skipped],
                          "skipped": [{"cell": c, "reason": why} for c, why in cannot],
                          "errors": [{"cell": c, "error": str(e), "exit_code": e.exit_code} for c, e in errors]},
                         indent=2))
    else:
        for cell_id, wheel in skipped:
            print(f"{cell_id}: asserted wheel: {wheel}")
        for r in results:
            if r.probe is not None:
                print(r.probe.render())
            if r.shard is not None and r.shard.get("job") == "compile":
                print(f"{r.cell.id}: compile shard {r.shard['index']}/{r.shard['count']}: "
                      f"{len(r.shard['units'])} TU(s) compiled into {settings.shard_dir / r.cell.id}")
            failed_imports = {c.wheel: c for c in r.imports if not c.passed}
            for pb in r.postbuild:
                if pb.stamped is not None and pb.stamped.path in failed_imports:
                    print(failed_imports[pb.stamped.path].render())
                    print(f"{r.cell.id}: FAILED the import check; nothing was written to {settings.out_dir}")
                elif pb.passed and pb.stamped is not None:
                    print(f"{r.cell.id}: asserted wheel: {pb.stamped.path}")
                else:
                    print(pb.report.render())
                    print(f"{r.cell.id}: FAILED the assertion; nothing was written to {settings.out_dir}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(step_summary(results, errors))
    if errors:
        return max(e.exit_code for _, e in errors)
    return EXIT_OK if all(r.passed for r in results) else EXIT_DEFECT
