"""Bounding the build caches: what ``farm cache prune`` removes, and what it keeps.

A build leaves a toolkit per (line, source, release, platform, components) in ``toolkit/``, a
build environment per (Python, torch, tools) in ``envs/`` (about 5 GB with torch), a source tree
per pinned commit or sdist in ``sources/``, a work folder per cell in ``build/``, and a probe of
each container image's interpreters and compiler in ``images/`` (per engine and image ID). Nothing
else removes them. The prune keeps what the next builds need and removes the rest:

- whatever the ledger's recent cells used (the last ``keep_recent`` entries): their source
  commits and sdists, the toolkits whose source, release, platform and components match their
  provenance, the environments of their Python and torch, their work folders;
- the sources today's recipes pin (a git tag's resolved commit, read from the fetch's pointer),
  with the trees, archives and git checkouts their ``source.vendor`` places (the composed tree
  keyed as the fetch keys it);
- the probes of the images the host's engine still holds (an image removed from the host is never
  probed by that ID again; the command asks the engines, :func:`farm.builder.images.held_probes`);
- anything changed within ``min_age_s`` (a build that is filling it now) or whose lock a running
  build holds.

:func:`plan_prune` decides (reads only); :func:`apply_prune` removes, each folder renamed aside
first so that an interrupted prune never leaves a half folder that looks whole.

Sizes count each file once, by inode: build environments share torch's files by hard links
(:mod:`farm.builder.envshare`), and a file's bytes are freed only when its last link goes. So an
item's ``size`` is what its files hold and ``frees`` what removing it (with the plan's other
removals) gives back; removing one of ten environments of one torch frees little, removing all ten
frees that torch once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from farm.builder.buildenv import SPEC_FILE
from farm.errors import FileSystemError
from farm.fsutil import Inode, TreeBytes, tree_bytes
from farm.model.cells import Cell
from farm.model.config import FarmConfig, GitSource, SdistSource
from farm.provenance.ledger import iter_entries
from farm.provenance.ledgerfiles import SEGMENT_SUFFIX, segments
from farm.source.fetch import git_pointer, pointed_commit, tree_sha256, vendor_description, vendored_key
from farm.toolkit.assemble import read_stamp
from farm.toolkit.request import PLATFORMS

KINDS = ("toolkit", "envs", "sources", "build", "images")
LINKED = "a link: farm removes nothing it reaches through one"
DEFAULT_KEEP_RECENT = 200
DEFAULT_MIN_AGE_S = 3600.0


@dataclass(frozen=True)
class Item:
    kind: str  # toolkit | envs | sources | build | images (a probe file; the others are folders)
    path: Path
    size: int  # the bytes its files hold, each file once however many hard links it has
    keep: str | None  # why it stays; None: removed
    # what removing it frees, with the plan's other removals: a file hard-linked from something that
    # stays (another environment, uv's cache) is freed only when its last link goes, and one whose
    # links all go is counted at the first removed folder that holds it
    frees: int

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.size, "bytes_freed": self.frees,
                "keep": self.keep}


@dataclass(frozen=True)
class PrunePlan:
    items: tuple[Item, ...]
    kept: int = 0  # the bytes the kept items hold, each file once

    @property
    def removed(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.keep is None)

    @property
    def freed(self) -> int:
        return sum(i.frees for i in self.removed)

    def to_json(self) -> dict[str, Any]:
        return {"bytes_freed": self.freed, "bytes_kept": self.kept, "items": [i.to_json() for i in self.items]}


@dataclass(frozen=True)
class InUse:
    """What the recent cells and today's recipes use: the keys each cache folder is matched on."""

    commits: frozenset[str] = frozenset()
    sdists: frozenset[str] = frozenset()
    # (source, release, NVIDIA platform, components)
    toolkits: frozenset[tuple[str, str, str, frozenset[str]]] = frozenset()
    envs: frozenset[tuple[str, str | None]] = frozenset()  # ("3.11", "2.8.0" or None)
    cells: frozenset[str] = frozenset()  # cell ids: the work folders
    vendored: frozenset[str] = frozenset()  # composed trees (source.vendor): fetch.vendored_key
    archives: frozenset[str] = frozenset()  # the vendored archives' sha256s
    images: frozenset[str] = frozenset()  # image probes (file names) whose image the host still holds
    notes: tuple[str, ...] = field(default=(), compare=False)


# ------------------------------------------------------------------------------------------------
# what is in use (pure over parsed ledger entries)
# ------------------------------------------------------------------------------------------------
def _public(version: str | None) -> str | None:
    return None if version is None else version.split("+", 1)[0]


def in_use(entries: Iterable[Mapping[str, Any]], *, commits: Iterable[str] = (), sdists: Iterable[str] = (),
           vendored: Iterable[str] = (), archives: Iterable[str] = (), images: Iterable[str] = ()) -> InUse:
    """The keys of what ``entries`` (ledger entries as JSON objects) used, plus the recipes' pins
    and the image probes whose image the host holds."""
    nvidia = {ours: theirs for theirs, ours in PLATFORMS.items()}
    used_commits, used_sdists = set(commits), set(sdists)
    used_vendored, used_archives = set(vendored), set(archives)
    toolkits: set[tuple[str, str, str, frozenset[str]]] = set()
    envs: set[tuple[str, str | None]] = set()
    cells: set[str] = set()
    for e in entries:
        source = e.get("source") or {}
        if source.get("kind") == "git" and source.get("commit"):
            used_commits.add(source["commit"])
        if source.get("kind") == "sdist" and source.get("sha256"):
            used_sdists.add(source["sha256"])
        vendor = source.get("vendor")
        identity = source.get("commit") or source.get("sha256") or source.get("tree_sha256")
        if isinstance(vendor, list) and isinstance(identity, str):
            used_vendored.add(vendored_key(identity, vendor))
            used_archives.update(v["sha256"] for v in vendor if isinstance(v, Mapping) and "sha256" in v)
            # a git entry's checkout is cached as a git source of that commit
            used_commits.update(v["commit"] for v in vendor if isinstance(v, Mapping) and v.get("kind") == "git"
                                and isinstance(v.get("commit"), str))
        cell = e.get("cell") or {}
        python = str(cell.get("python", ""))
        toolchain = e.get("toolchain") or {}
        if python.startswith("cp") and len(python) > 3:
            torch = _public(toolchain.get("torch")) if cell.get("torch") not in (None, "none") else None
            envs.add((f"{python[2]}.{python[3:]}", torch))
        tk = toolchain.get("toolkit") or {}
        if tk.get("source") in ("redist", "pypi") and tk.get("release") and cell.get("platform") in nvidia:
            names = frozenset(c["name"] for c in tk.get("components") or () if isinstance(c, Mapping) and "name" in c)
            toolkits.add((tk["source"], tk["release"], nvidia[cell["platform"]], names))
        if e.get("package") and e.get("version") and cell:
            cells.add(Cell(str(e["package"]), str(e["version"]), str(cell.get("cuda")), str(cell.get("torch")),
                           python, str(cell.get("platform"))).id)
    return InUse(frozenset(used_commits), frozenset(used_sdists), frozenset(toolkits), frozenset(envs),
                 frozenset(cells), frozenset(used_vendored), frozenset(used_archives), frozenset(images))


def recent_entries(ledger: Path, keep_recent: int) -> list[dict[str, Any]]:
    """The last ``keep_recent`` entries of each package's newest epoch in the ledger (a file's
    lines are appended in build order); of the one file of a single-file ledger."""
    if keep_recent <= 0 or not ledger.exists():
        return []
    newest: dict[str, tuple[int, Path]] = {}
    for name, file in segments(ledger):
        package, _, rest = name.partition("/e")
        epoch = int(rest.removesuffix(SEGMENT_SUFFIX)) if rest else 0
        if package not in newest or epoch > newest[package][0]:
            newest[package] = (epoch, file)
    return [entry for _, file in sorted(newest.values(), key=lambda ef: str(ef[1]))
            for entry in [e for _, e in iter_entries(file)][-keep_recent:]]


def recipe_vendored(config: FarmConfig, sources: Path) -> tuple[set[str], set[str]]:
    """(composed-tree keys, archive sha256s) of today's recipes' ``source.vendor``: a tree's key
    needs its base's identity, so a git tag counts once the fetch's pointer resolved it."""
    keys: set[str] = set()
    archives: set[str] = set()
    for recipe in config.recipes.values():
        if not recipe.vendor:
            continue
        archives.update(entry.origin.sha256 for entry in recipe.vendor if not isinstance(entry.origin, GitSource))
        src = recipe.source
        identity: str | None
        if isinstance(src, SdistSource):
            identity = src.sha256.lower()
        elif isinstance(src, GitSource):
            identity = pointed_commit(git_pointer(src, sources)) or (src.ref.lower() if len(src.ref) == 40 else None)
        else:
            identity = tree_sha256(src.path) if src.path.is_dir() else None
        if identity is not None:
            keys.add(vendored_key(identity, [vendor_description(entry) for entry in recipe.vendor]))
    return keys, archives


def recipe_pins(config: FarmConfig, sources: Path) -> tuple[set[str], set[str]]:
    """(git commits, sdist sha256s) today's recipes pin: a tag through the fetch's cached pointer."""
    commits, sdists = set(), set()
    for recipe in config.recipes.values():
        src = recipe.source
        if isinstance(src, SdistSource):
            sdists.add(src.sha256.lower())
        elif isinstance(src, GitSource):
            commit = pointed_commit(git_pointer(src, sources))
            if commit is not None:
                commits.add(commit)
            if len(src.ref) == 40:
                commits.add(src.ref.lower())
        # a vendored repository's checkout is cached as a git source of its pinned commit
        commits.update(entry.origin.ref for entry in recipe.vendor if isinstance(entry.origin, GitSource))
    return commits, sdists


# ------------------------------------------------------------------------------------------------
# the cache folders, each with the key it is matched on
# ------------------------------------------------------------------------------------------------
def _newest_change(path: Path) -> float:
    """The newest mtime of the folder and its direct entries (a build writing into it touches them)."""
    newest = path.lstat().st_mtime
    with contextlib.suppress(OSError), os.scandir(path) as it:
        for entry in it:
            with contextlib.suppress(OSError):
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    return newest


def _locked(lock: Path) -> bool:
    """Whether a running build holds ``lock`` (farm's file locks: toolkit, environment, source)."""
    if not lock.exists():
        return False
    try:
        with FileLock(str(lock), timeout=0):
            return False
    except Timeout:
        return True


def _toolkit_key(folder: Path) -> tuple[str, str, str, frozenset[str]] | None:
    with contextlib.suppress(KeyError, TypeError):
        req = (read_stamp(folder) or {})["request"]
        return (req["source"], req["release"], req["platform"], frozenset(req["components"]))
    return None


def _env_key(folder: Path) -> tuple[str, str | None] | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        spec = json.loads((folder / SPEC_FILE).read_text())
        torch = spec["torch"]
        return (".".join(spec["python"].split(".")[:2]), torch.split("==", 1)[1] if torch else None)
    return None


def _candidates(cache: Path) -> Iterable[tuple[str, Path, Path | None]]:
    """(kind, folder, its lock file) for every prunable folder under ``cache``. A link on the way
    (``build/``, ``envs/``, ``toolkit/<line>/``, a ``sources/`` folder, or the entry itself) is not
    farm's: it is yielded as it stands and never entered, so nothing it points to is removed."""
    def entries(folder: Path) -> list[Path]:
        return [] if folder.is_symlink() or not folder.is_dir() else sorted(folder.iterdir())

    for line in entries(cache / "toolkit"):
        if line.is_symlink():
            yield "toolkit", line, None
        for folder in entries(line):
            if folder.is_dir() and not folder.name.startswith("."):
                yield "toolkit", folder, Path(f"{folder}.lock")
    envs = cache / "envs"
    for folder in entries(envs):
        if folder.is_dir() and not folder.name.startswith("."):
            yield "envs", folder, envs / f".{folder.name}.lock"
    for sub in ("git", "sdist", "vendored", "vendor"):
        base = cache / "sources" / sub
        for folder in entries(base) if not base.parent.is_symlink() else []:
            if folder.is_dir() and not folder.name.startswith("tmp-"):
                yield "sources", folder, (base / f"{folder.name}.lock" if sub != "git" else None)
    for name in ("toolkit", "envs", "sources", "sources/git", "sources/sdist", "sources/vendored", "sources/vendor",
                 "build", "images"):
        if (cache / name).is_symlink():
            yield name.split("/")[0], cache / name, None
    for folder in entries(cache / "build"):
        if folder.is_dir():
            yield "build", folder, None
    for probe in entries(cache / "images"):
        if probe.suffix == ".json" and probe.is_file() and not probe.is_symlink():
            yield "images", probe, None


def _why_kept(kind: str, folder: Path, used: InUse) -> str | None:
    if kind == "toolkit":  # no stamp: a half assembly (the toolkit is made afresh anyway)
        return "a recent cell's toolkit" if _toolkit_key(folder) in used.toolkits else None
    if kind == "envs":
        return "a recent cell's Python and torch" if _env_key(folder) in used.envs else None
    if kind == "sources" and folder.parent.name == "vendored":
        return "a recent cell's or a recipe's source with its vendored trees" if folder.name in used.vendored else None
    if kind == "sources" and folder.parent.name == "vendor":
        return "a recent cell's or a recipe's vendored archive" if folder.name in used.archives else None
    if kind == "images":
        return "an image this host's engine holds" if folder.name in used.images else None
    if kind == "sources":
        name = folder.name.removesuffix("-sub")
        return "a recent cell's or a recipe's pinned source" if name in used.commits or name in used.sdists else None
    return "a recent cell's work folder" if folder.name in used.cells else None


def plan_prune(cache: Path, used: InUse, *, kinds: Iterable[str] = KINDS,
               min_age_s: float = DEFAULT_MIN_AGE_S) -> PrunePlan:
    """Every prunable folder of ``cache`` with why it stays (None: it goes) and its bytes."""
    now = time.time()
    wanted = set(kinds)
    found: list[tuple[str, Path, str | None, TreeBytes]] = []
    for kind, folder, lock in _candidates(Path(cache)):
        if kind not in wanted:
            continue
        keep = LINKED if folder.is_symlink() else _why_kept(kind, folder, used)
        if keep is None and lock is not None and _locked(lock):
            keep = "in use: a running build holds its lock"
        if keep is None and now - _newest_change(folder) < min_age_s:
            keep = f"changed within the last {min_age_s:.0f} s"
        found.append((kind, folder, keep, tree_bytes(folder)))
    frees, kept = _account(found)
    return PrunePlan(tuple(Item(kind, folder, held.held, keep, freed)
                           for (kind, folder, keep, held), freed in zip(found, frees, strict=True)), kept)


def _account(found: Sequence[tuple[str, Path, str | None, TreeBytes]]) -> tuple[list[int], int]:
    """Per folder, the bytes removing the plan's removed folders frees: its single-link files, and
    each hard-linked file whose every link is in a removed folder (counted once, at the first);
    and the bytes the kept folders hold, each file once."""
    removed_links: Counter[Inode] = Counter()
    for _, _, keep, held in found:
        if keep is None:
            removed_links.update({inode: here for inode, (_, _, here) in held.linked.items()})
    counted: set[Inode] = set()
    kept_linked: dict[Inode, int] = {}
    frees = []
    kept = 0
    for _, _, keep, held in found:
        total = 0
        if keep is None:
            total = held.single
            for inode, (size, nlink, _) in held.linked.items():
                if removed_links[inode] >= nlink and inode not in counted:
                    counted.add(inode)
                    total += size
        else:
            kept += held.single
            kept_linked.update((inode, size) for inode, (size, _, _) in held.linked.items())
        frees.append(total)
    return frees, kept + sum(kept_linked.values())


def apply_prune(plan: PrunePlan, *, say: Any = None) -> int:
    """Remove the plan's folders; returns the bytes freed (:attr:`Item.frees`). Each is renamed
    aside, then removed."""
    freed = 0
    for item in plan.removed:
        aside = item.path.with_name(f".pruning-{item.path.name}")
        try:
            item.path.rename(aside)
        except FileNotFoundError:
            continue  # gone meanwhile
        except OSError as exc:
            raise FileSystemError(f"cannot remove {item.path}: {exc.strerror or exc}", where=str(item.path),
                                  hint="check the cache folder's permissions") from None
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside, ignore_errors=True)
        else:  # an image probe (or a link put there since the plan: the link goes, never what it names)
            aside.unlink(missing_ok=True)
        if item.kind == "sources":  # the fetch's pointers to this commit now point at nothing
            for pointer in item.path.parent.glob("ref-*.json"):
                if pointed_commit(pointer) == item.path.name.removesuffix("-sub"):
                    pointer.unlink(missing_ok=True)
        freed += item.frees
        if say is not None:
            shared = f", {item.frees} of them freed (the rest is shared by hard links with other folders)" \
                if item.frees != item.size else ""
            say(f"removed {item.kind} {item.path} ({item.size} bytes{shared})")
    return freed
