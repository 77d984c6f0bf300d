"""``farm rebuild WHEEL``: build a wheel's cell again from its provenance and compare the files.

WHEEL is a local ``.whl``, an http(s) URL of one, or a wheel's file name on a simple-API index
(``--index URL``: the farm's static index, its root or one of its channels). farm reads the
wheel's ``_build_info.json``, checks that this farm repository holds the configuration that
built it (the sha256 of its recipe and of ``_defaults.yml``), builds that cell as it was built
(its builder, the recipe's pinned source, the line's pinned toolkit, its arch list) into
``--out``, and compares the two files (docs/reproducible.md). Exit 0: the same bytes. Exit 1:
what differs (each member, the ELF sections of a ``.so``, the provenance's keys). Exit 2: the
wheel has no farm provenance, or this repository holds another configuration (check out the
commit that built it). Exit 3: the build cannot run here, or the wheel cannot be downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import urllib.parse
from pathlib import Path, PurePosixPath

from farm import cacheseal
from farm.binary.wheeldiff import compare_wheels
from farm.builder import procs
from farm.builder.builders import ENGINES, BuilderKind, BuildSettings, build_cell
from farm.builder.compilecache import resolve as resolve_compile_cache
from farm.commands.build import preflight_cells, require_build_extra
from farm.errors import EXIT_DEFECT, EXIT_OK, NetworkError, TooLarge, ToolError, UsageError, WheelError
from farm.fsutil import sha256_file
from farm.load.recipes import load_config
from farm.model.cells import Cell
from farm.model.config import FarmConfig
from farm.netutil import download, project_url, read_page
from farm.provenance.buildinfo import BuildInfo, Run, read_wheel
from farm.provenance.crawl import MAX_WHEEL_BYTES
from farm.provenance.ledger import LedgerIndex
from farm.publish.index import describe
from farm.schedule.matrix import Filters, compute_matrix


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("wheel", metavar="WHEEL", help="a .whl, an http(s) URL of one, or a wheel's file name "
                                                        "on the index given with --index")
    parser.add_argument("--index", metavar="URL", help="a simple-API index that lists WHEEL (the farm's static "
                                                        "index: its root or a channel such as .../cu130/torch2.14/)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--cache-dir", type=Path, help="sources, toolkits, build folders (default: ROOT/.cache)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="where the rebuilt wheel goes, emptied first (default: CACHE/rebuild/<cell>)")
    parser.add_argument("--builder", choices=[b.value for b in BuilderKind],
                        help="build with this builder (default: the one the provenance names)")
    parser.add_argument("--engine", choices=ENGINES, default=os.environ.get("FARM_CONTAINER_ENGINE", "docker"),
                        help="cibuildwheel's container engine (default: $FARM_CONTAINER_ENGINE or docker)")
    parser.add_argument("--image", default=os.environ.get("FARM_MANYLINUX_IMAGE"),
                        help="the manylinux image the wheel was built in (default: $FARM_MANYLINUX_IMAGE or "
                             "cibuildwheel's); a reproducible rebuild needs the same image")
    parser.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                        help="compile without the compiler cache (the result is the same file either way)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _say(message: str) -> None:
    print(f"farm rebuild: {message}", file=sys.stderr, flush=True)


def _fetch(url: str, folder: Path, sha256: str | None) -> Path:
    """``url`` downloaded into ``folder`` (bounded), its sha256 checked against the index's."""
    name = PurePosixPath(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    if not name.endswith(".whl") or "/" in name or name.startswith("."):
        raise UsageError(f"{url} does not name a wheel file", hint="give the URL of a .whl")
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / name
    try:
        got = download(url, dest, max_bytes=MAX_WHEEL_BYTES, progress=_say)
    except TooLarge:
        raise WheelError(f"larger than {MAX_WHEEL_BYTES >> 20} MiB: not a wheel any target publishes", where=url,
                         hint="check what the URL points at") from None
    except NetworkError as exc:
        raise ToolError(f"cannot download {url}: {exc.message}", hint="check the URL and the network") from None
    if sha256 is not None and got.sha256 != sha256:
        dest.unlink(missing_ok=True)
        raise WheelError(f"the download's sha256 is {got.sha256}, the index says {sha256}", where=url,
                         hint="the index or the file changed under it: download it again")
    return dest


def _on_index(index: str, filename: str) -> tuple[str, str | None]:
    """(URL, sha256 the index gives) of ``filename`` on ``index``: its project's page under the
    given URL, else under the wheel's channel of a farm index's root (``cu130/torch2.14/``)."""
    if urllib.parse.urlsplit(index).scheme not in ("http", "https"):
        raise UsageError(f"--index {index!r} is not an http(s) URL")
    described = describe(filename, "", 0, None)  # its project and channel, as the index files it
    project = described.project
    base = index if index.endswith("/") else index + "/"
    channels = [base] + ([f"{base}{described.home}/"] if described.home else [])
    tried = []
    for channel in channels:
        page_url = project_url(channel, project)
        tried.append(page_url)
        try:
            page = read_page(page_url)
        except NetworkError as exc:
            if exc.status == 404:  # not this channel: the next
                continue
            raise ToolError(f"cannot read the index: {exc.message}", where=page_url,
                            hint="check the index URL and the network") from None
        except ValueError as exc:
            raise WheelError(f"not a simple-API page: {exc}", where=page_url) from None
        for file in page.files:
            if file.filename == filename:
                return file.url, file.sha256
    raise UsageError(f"{filename} is not on the index", where=" or ".join(tried),
                     hint="check the file name and the index URL (the index root, or the channel pip uses)")


def obtain(args: argparse.Namespace, folder: Path) -> Path:
    """The wheel to rebuild, as a local file (downloaded into ``folder`` when it is remote)."""
    given = args.wheel
    if args.index:
        url, sha256 = _on_index(args.index, PurePosixPath(given).name)
        return _fetch(url, folder, sha256)
    if urllib.parse.urlsplit(given).scheme in ("http", "https"):
        return _fetch(given, folder, None)
    path = Path(given)
    if not path.is_file():
        raise UsageError(f"{given}: no such wheel file", hint="give a .whl, its URL, or its file name with --index")
    return path


def _check_config(info: BuildInfo, config: FarmConfig, wheel: Path) -> None:
    """This repository must hold the configuration that built the wheel: the recipe's and
    ``_defaults.yml``'s sha256, as recorded."""
    assert info.package is not None
    recipe = config.recipe(info.package)
    moved = [f"{what} (the wheel's {then}, this repository's {now})"
             for what, then, now in (("packages/" + info.package + ".yml", info.recipe_sha256, recipe.sha256),
                                     ("_defaults.yml", info.defaults_sha256, config.defaults.sha256))
             if then != now]
    if moved:
        ledger = LedgerIndex.load(config.ledger_path)
        record = ledger.by_sha256(sha256_file(wheel))
        run = ledger.ledger_entry(record).info.run if record is not None else None
        commit = run.commit if isinstance(run, Run) else None
        raise UsageError(f"this farm repository holds another configuration than the one that built the wheel: "
                         f"{'; '.join(moved)}", where=str(wheel),
                         hint=(f"check out commit {commit} (the ledger's record of this wheel) and rebuild there"
                               if commit else "check out the farm commit that built it and rebuild there"))


def run(args: argparse.Namespace) -> int:
    """Interrupted (SIGINT, SIGTERM), the build's processes stop first, as ``farm build``'s do."""
    with procs.interruptible():
        return _rebuild(args)


def _rebuild(args: argparse.Namespace) -> int:
    procs.stall_limit(os.environ)  # a bad $FARM_STALL_TIMEOUT is refused before anything runs
    require_build_extra()
    root = args.root.absolute()
    cache = (args.cache_dir or root / ".cache").absolute()
    wheel = obtain(args, cache / "rebuild" / "downloads")
    info = read_wheel(wheel)
    if info is None or not info.asserted or info.package is None:
        raise UsageError("the wheel carries no asserted farm provenance: nothing says how it was built",
                         where=str(wheel), hint="farm rebuilds wheels farm built (their _build_info.json)")
    cacheseal.refuse_env_key(os.environ, f"the package code of {info.package} (its rebuild and import check)")
    config = load_config(root, packages=[info.package])
    _check_config(info, config, wheel)
    recipe = config.recipe(info.package)
    c = info.cell
    if None in (c.cuda, c.torch, c.python, c.platform):
        raise UsageError(f"the provenance names no whole cell: {c.to_dict()}", where=str(wheel))
    cell = Cell(info.package, info.version, str(c.cuda), str(c.torch), str(c.python), str(c.platform))
    builder = args.builder or (info.toolchain.builder if info.toolchain is not None else None) or "cibuildwheel"
    out = (args.out or cache / "rebuild" / cell.id).absolute()
    if out.exists():
        shutil.rmtree(out)
    settings = BuildSettings(
        builder=BuilderKind(builder), engine=args.engine, images={"x86_64": args.image} if args.image else {},
        out_dir=out, work_root=cache / "build", source_cache=cache / "sources", toolkit_root=cache / "toolkit",
        env_root=cache / "envs", shard_dir=cache / "shards",
        compile_cache=resolve_compile_cache(args.compile_cache, cache / "compile-cache"))
    py = cell.python.removeprefix("cp")
    filters = Filters.parse(config, packages=[cell.package], cuda=[cell.cuda], torch=[cell.torch],
                            python=[f"{py[0]}.{py[1:]}"], platform=[cell.platform])
    planned = [pc for pc in compute_matrix(config, LedgerIndex.empty(), filters, overwrite=True).cells
               if pc.cell == cell]
    if not planned:
        raise UsageError(f"today's configuration has no cell {cell.id}", where=str(wheel),
                         hint="check out the farm commit that built it and rebuild there")
    named = frozenset({"platform", "engine", "image", "python", "compiler", "system", "disk", "network"})
    buildable, errors, _ = preflight_cells(planned, config, recipe, settings, named)
    if errors:
        raise errors[0][1]
    (pc, interpreter), = buildable
    _say(f"rebuilding {cell.id} ({builder}) from {wheel.name}'s provenance into {out}")
    result = build_cell(config, recipe, pc.cell, settings, arch=pc.arch, torch_version=pc.torch_version,
                        interpreter=interpreter, log=_say)
    rebuilt = [pb.stamped.path for pb in result.postbuild if pb.passed and pb.stamped is not None]
    if len(rebuilt) != 1:
        raise ToolError(f"the rebuild of {cell.id} made no asserted wheel", hint="read the build log above")
    diff = compare_wheels(wheel, rebuilt[0])
    if args.json:
        print(json.dumps({"cell": cell.id, **diff.to_json()}, indent=2))
    else:
        print("\n".join(diff.render()))
    return EXIT_OK if diff.identical else EXIT_DEFECT
