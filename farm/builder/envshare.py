"""A new build environment's installed files, hard-linked to the same files of its ready siblings.

Every build environment of one Python and torch holds the same torch (about 5.4 GB). uv installs
from its cache by hard link, so environments it fills already share their files; pip copies, so
ten environments with torch from pip's configured indexes held ten copies. Once an environment is
made, and before its marker makes it ready, :func:`share` replaces each regular file under its
``site-packages`` by a hard link to the file at the same relative path in a ready sibling (same
Python version, same torch from the same source; the caller picks them) when the two are the
same bytes, compared in full.

A file is left as installed when:

- it already has another link: the installer linked it, or it is the sibling's file already. uv
  tries a copy-on-write clone, then a hard link from its cache, then a copy (its cache on another
  file system), so on ext4 its files arrive linked and are not even read here. On btrfs or XFS its
  clones already share their blocks: linking them frees nothing more than names, though the saved
  bytes count them;
- the two differ in size, bytes, permissions or owner (a hard link has one mode and one owner), or
  lie on different file systems (a link cannot cross them: the copy stays);
- it is a ``.py`` source whose mtime differs: its ``__pycache__`` entry records the source's mtime
  and would go stale. pip stamps each file with its install time, so pip's sources (about 0.1 GB
  of a CUDA torch's 5.4 GB) stay copies;
- it is a symbolic link, or under ``__pycache__`` (a ``.pyc`` records the path it was compiled
  at, so it is never the same bytes in two environments).

Nothing is followed: the walk enters no symbolic link, so every file listed lies inside its
environment, and a file is opened and linked only while it is still the inode that was listed. A
link is made under a temp name beside the file and renamed over it, so a crash leaves either the
copy or the link, never half a file (and the unready environment is made again anyway).

Hard links share their contents: a write in place into one environment's file would change every
environment holding it. Nothing farm runs writes in place: pip and uv install a file as a new
file (pip unlinks the old name first, uv links or renames into place) and uninstall by removing or
renaming names; Python writes bytecode to a temp file and renames it; and a ready environment is
never installed into again (other contents make another environment). A file edited in place by
hand changes all its links: remove the environment instead.

:func:`plan` decides from the listings alone; :func:`listing`, :func:`same_bytes` and
:func:`link_over` are the file-system side.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.fsutil import CHUNK, open_plain, temp_prefix


@dataclass(frozen=True)
class FileFacts:
    """What deciding a link needs of one regular file (its ``lstat``)."""

    size: int
    mode: int  # st_mode: type and permission bits
    uid: int
    gid: int
    mtime: int  # whole seconds, as a .pyc records its source's
    dev: int
    ino: int
    nlink: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileFacts:
        return cls(st.st_size, st.st_mode, st.st_uid, st.st_gid, int(st.st_mtime), st.st_dev, st.st_ino,
                   st.st_nlink)

    @property
    def inode(self) -> tuple[int, int]:
        return (self.dev, self.ino)


# path relative to the environment's folder -> the regular file there
Listing = Mapping[str, FileFacts]


def why_not(rel: str, mine: FileFacts, theirs: FileFacts) -> str | None:
    """Why the new environment's file ``rel`` cannot become a link to the sibling's; None when it
    can, once their bytes are found the same."""
    if mine.inode == theirs.inode:
        return "already the same file"
    if mine.nlink > 1:
        return "already linked (by the installer)"
    if mine.dev != theirs.dev:
        return "on another file system"
    if mine.size != theirs.size:
        return "other bytes"
    if mine.size == 0:
        return "empty"
    if (mine.mode, mine.uid, mine.gid) != (theirs.mode, theirs.uid, theirs.gid):
        return "other permissions or owner"
    if rel.endswith(".py") and mine.mtime != theirs.mtime:
        return "a source whose bytecode records its mtime"
    return None


@dataclass(frozen=True)
class Candidate:
    rel: str
    facts: FileFacts  # the new environment's file
    sources: tuple[tuple[int, FileFacts], ...]  # (sibling index, its file): one per inode, in sibling order


@dataclass(frozen=True)
class SharePlan:
    candidates: tuple[Candidate, ...]
    already: int  # bytes of the new environment already shared by a hard link


def plan(mine: Listing, siblings: Sequence[Listing]) -> SharePlan:
    """Which files of ``mine`` may become links, to which siblings' files (pure)."""
    candidates = []
    already = 0
    for rel in sorted(mine):
        facts = mine[rel]
        if facts.nlink > 1:
            already += facts.size
            continue
        sources: list[tuple[int, FileFacts]] = []
        seen: set[tuple[int, int]] = set()
        for index, sibling in enumerate(siblings):
            theirs = sibling.get(rel)
            if theirs is None or theirs.inode in seen or why_not(rel, facts, theirs) is not None:
                continue
            seen.add(theirs.inode)
            sources.append((index, theirs))
        if sources:
            candidates.append(Candidate(rel, facts, tuple(sources)))
    return SharePlan(tuple(candidates), already)


# ------------------------------------------------------------------------------------------------
# the file system
# ------------------------------------------------------------------------------------------------
def listing(env: Path) -> dict[str, FileFacts]:
    """The regular files under ``env``'s ``lib/python*/site-packages``, by path relative to
    ``env``; no symbolic link is entered or listed, ``__pycache__`` is skipped, and what cannot be
    read is left out."""
    found: dict[str, FileFacts] = {}
    stack: list[str] = []
    if (env / "lib").is_symlink():
        return found
    try:
        with os.scandir(env / "lib") as it:
            pythons = [e.path for e in it if e.name.startswith("python") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return found
    for python in pythons:
        site = f"{python}{os.sep}site-packages"
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(site).st_mode):
                stack.append(site)
    base = len(str(env)) + 1
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    found[entry.path[base:]] = FileFacts.of(entry.stat(follow_symlinks=False))
            except OSError:
                continue
    return found


def _is(fh: BinaryIO, facts: FileFacts) -> bool:
    st = os.fstat(fh.fileno())
    return (st.st_dev, st.st_ino, st.st_size) == (facts.dev, facts.ino, facts.size)


def same_bytes(a: Path, a_facts: FileFacts, b: Path, b_facts: FileFacts) -> bool:
    """Whether ``a`` and ``b`` are still the listed files and hold the same bytes (read in full,
    stopping at the first difference; never through a link)."""
    try:
        with open_plain(a) as fa, open_plain(b) as fb:
            if not (_is(fa, a_facts) and _is(fb, b_facts)):
                return False
            while True:
                chunk = fa.read(CHUNK)
                if chunk != fb.read(CHUNK):
                    return False
                if not chunk:
                    return True
    except (OSError, ValueError):  # gone, or no longer a regular file
        return False


def link_over(source: Path, source_facts: FileFacts, target: Path, target_facts: FileFacts) -> bool:
    """Replace ``target`` by a hard link to ``source``: linked under a temp name beside it, checked
    to be the listed source, then renamed over ``target``. False when either is gone or changed
    (the copy stays); an OSError when no link can be made here (another file system, links not
    permitted, a full disk)."""
    tmp = target.with_name(f"{temp_prefix(target.name)}link.tmp")
    try:
        os.link(source, tmp, follow_symlinks=False)
    except FileNotFoundError:
        return False
    try:
        linked = os.lstat(tmp)
        now = os.lstat(target)
        if ((linked.st_dev, linked.st_ino) != source_facts.inode
                or (now.st_dev, now.st_ino) != target_facts.inode):
            tmp.unlink()
            return False
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


@dataclass(frozen=True)
class ShareReport:
    files: int  # files now links to a sibling's
    saved: int  # their bytes: the copies removed
    already: int  # bytes that were already links (the installer's)
    seconds: float
    stopped: str | None = None  # why linking stopped early (the rest stays copied)


def share(env: Path, siblings: Sequence[Path]) -> ShareReport:
    """Hard-link ``env``'s files to the same files of ``siblings`` (ready environments of its
    Python and torch, folders beside it); what it saved."""
    started = time.monotonic()
    lists = [listing(s) for s in siblings]
    decided = plan(listing(env), lists)
    files = saved = 0
    stopped = None
    for cand in decided.candidates:
        target = env / cand.rel
        for index, theirs in cand.sources:
            source = siblings[index] / cand.rel
            if not same_bytes(target, cand.facts, source, theirs):
                continue
            try:
                if link_over(source, theirs, target, cand.facts):
                    files += 1
                    saved += cand.facts.size
            except OSError as exc:  # no links here (another file system, not permitted, full): copies stay
                stopped = f"linking {target} to {source}: {exc.strerror or exc}"
            break
        if stopped:
            break
    return ShareReport(files, saved, decided.already, time.monotonic() - started, stopped)
