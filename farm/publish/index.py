"""A static PEP 503 index that pip and uv install from, regenerated from the ledger.

Layout of the tree (every path relative to its root)::

    files/<wheel>                      the wheels this index serves
    files/<wheel>.metadata             PEP 658 core metadata (the wheel's METADATA, byte for byte)
    cu128/torch2.8/index.html          one PEP 503 root per (CUDA, torch) channel
    cu128/torch2.8/<project>/index.html
    cu128/index.html                   packages that do not link torch (``torch: none``) ...
    cu128/<project>/index.html
    flat/index.html                    every wheel on one page (``pip --find-links``)
    index.html                         the channels
    packages.json                      machine-readable: channels, projects, files
    compat/...                         which GPUs each wheel runs on (farm.publish.compat)

Torch-free wheels live in their CUDA line's ``cu128/`` channel *and* are listed in every
``cu128/torch*/`` channel of the tree, so one ``--index-url`` serves a whole environment.
One page per channel because a local label sorts above its public version: a page mixing
``+cu128torch2.7`` and ``+cu128torch2.8`` makes pip choose by label, not by the installed torch.

Every link carries ``#sha256=`` (pip and uv enforce it) and, PEP 658/714,
``data-dist-info-metadata`` and ``data-core-metadata``. Project names are PEP 503 normalised.

A tree may also list wheels it does not store (:func:`linked`): the pages then link to the URL
the ledger records for another target (GitHub release assets), without PEP 658 metadata.

The tree is a function of ``files/`` and the ledger: each stored wheel must have a ledger entry
(or a fragment) with its sha256. Output is deterministic, so regenerating an unchanged tree
rewrites identical bytes. A regeneration that would drop a (channel, project) the previous
``packages.json`` listed is refused unless that project is named in ``allow_drop``: a lost
project breaks every environment that installs from it.
"""

from __future__ import annotations

import hashlib
import html
import json
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

from filelock import FileLock
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from farm import __version__, jsonread
from farm.errors import DefectError, LedgerError, UsageError
from farm.fsutil import atomic_write, read_chunks, sha256_file, sweep_leftovers
from farm.model.install import FIND_PAGE
from farm.model.label import NO_TORCH, parse_local_label
from farm.provenance.buildinfo import Attestation
from farm.publish import compat
from farm.publish.wheelmeta import read_member

FILES = "files"
PACKAGES_JSON = "packages.json"
SCHEMA_VERSION = 1


# the sha256 the ledger (or a fragment of this batch) records for a file name; None: not recorded
EntryLookup = Callable[[str], str | None]
# the attestation the ledger records for a file name; None: not attested
Attested = Callable[[str], Attestation | None]


@dataclass(frozen=True)
class IndexFile:
    """One wheel as the index shows it."""

    filename: str
    sha256: str
    size: int
    project: str  # PEP 503 normalised
    version: str
    cuda_label: str | None  # "cu128"; None when the local label names no CUDA line
    torch_label: str | None  # "torch2.8"; None for torch-free wheels
    metadata_sha256: str | None
    requires_python: str | None
    # Where the wheel lives when the tree does not store it (a GitHub release asset); None: files/.
    url: str | None = None

    @property
    def location(self) -> str:
        """Where pages link the wheel: its URL, or its path under the tree's root."""
        return self.url or f"{FILES}/{quote(self.filename)}"

    @property
    def home(self) -> str | None:
        """The channel the wheel belongs to (``cu128/torch2.8``, ``cu128``)."""
        if self.cuda_label is None:
            return None
        return f"{self.cuda_label}/{self.torch_label}" if self.torch_label else self.cuda_label


def describe(filename: str, sha256: str, size: int, metadata: bytes | None, url: str | None = None) -> IndexFile:
    """An :class:`IndexFile` from a wheel's name, hash and METADATA bytes (pure)."""
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise UsageError(f"not a wheel file name: {exc}", where=filename) from None
    label = parse_local_label(version.local)
    requires = None
    meta_sha = None
    if metadata is not None:
        meta_sha = hashlib.sha256(metadata).hexdigest()
        requires = BytesHeaderParser().parsebytes(metadata).get("Requires-Python")
    return IndexFile(
        filename, sha256, size, canonicalize_name(name), str(version),
        label.cu if label else None,
        f"torch{label.torch}" if label and label.torch != NO_TORCH else None,
        meta_sha, str(requires).strip() if requires else None, url,
    )


def linked(entries: Iterable[Mapping[str, Any]], target: str) -> list[IndexFile]:
    """Index files for ledger entries published to ``target`` (pages link to that URL; PEP 658
    metadata is not offered, since it would have to live beside the wheel)."""
    urls = ((e, next((p.get("url") for p in e.get("published") or () if p.get("target") == target), None))
            for e in entries)
    return [describe(str(e["filename"]), str(e["sha256"]), int(e["size"]), None, url) for e, url in urls if url]


# --------------------------------------------------------------------------------------------
# Pure core: files -> pages
# --------------------------------------------------------------------------------------------
def channels(files: Iterable[IndexFile]) -> dict[str, dict[str, list[IndexFile]]]:
    """channel -> project -> files, with torch-free wheels also in their CUDA line's torch
    channels."""
    files = list(files)
    torch_channels: dict[str, set[str]] = {}
    for f in files:
        if f.cuda_label and f.torch_label:
            torch_channels.setdefault(f.cuda_label, set()).add(f.home)  # type: ignore[arg-type]
    out: dict[str, dict[str, list[IndexFile]]] = {}
    for f in files:
        if f.home is None:
            continue
        homes = [f.home]
        if f.torch_label is None:
            homes += sorted(torch_channels.get(f.cuda_label or "", ()))
        for home in homes:
            out.setdefault(home, {}).setdefault(f.project, []).append(f)
    return {ch: {p: sorted(fs, key=lambda f: f.filename) for p, fs in sorted(projects.items())}
            for ch, projects in sorted(out.items())}


def page(title: str, links: Iterable[str], *, head: str = "") -> bytes:
    body = "\n".join(f"    {link}<br>" for link in links)
    return (
        "<!DOCTYPE html>\n<html>\n  <head>\n"
        f'    <meta name="pypi:repository-version" content="1.1">\n{head}'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n"
        f"    <h1>{html.escape(title)}</h1>\n{body}\n  </body>\n</html>\n"
    ).encode()


def file_link(f: IndexFile, prefix: str) -> str:
    href = html.escape(f.url) if f.url else f"{prefix}{FILES}/{quote(f.filename)}"
    attrs = [f'href="{href}#sha256={f.sha256}"']
    if f.requires_python:
        attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
    if f.metadata_sha256:
        # PEP 714 renamed the attribute; older pip reads the PEP 658 name: write both.
        attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
    return f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a>"


def packages_json(files: Iterable[IndexFile],
                  by_channel: Mapping[str, Mapping[str, list[IndexFile]]]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "generator": f"farm {__version__}",
        "channels": {
            ch: {p: [f.filename for f in fs] for p, fs in projects.items()}
            for ch, projects in by_channel.items()
        },
        "files": {
            f.filename: {k: v for k, v in asdict(f).items() if k != "filename"}
            | {"url": f.location}
            for f in sorted(files, key=lambda f: f.filename)
        },
    }


def channel_pages(by_channel: Mapping[str, Mapping[str, list[IndexFile]]], title: str,
                  more: Callable[[list[IndexFile], str], list[str]] | None = None) -> dict[str, bytes]:
    """Each channel's page (``title``) and its projects' pages; ``more``: the links a project's page
    lists after its files' (given its files and the way up to the tree's root)."""
    pages: dict[str, bytes] = {}
    for channel, projects in by_channel.items():
        pages[f"{channel}/index.html"] = page(
            f"{title} ({channel})", (f'<a href="{p}/">{p}</a>' for p in projects))
        up = "../" * (channel.count("/") + 2)
        for project, pfiles in projects.items():
            pages[f"{channel}/{project}/index.html"] = page(
                f"Links for {project}", [*(file_link(f, up) for f in pfiles), *(more(pfiles, up) if more else ())])
    return pages


def render(files: Iterable[IndexFile]) -> dict[str, bytes]:
    """Every page of the tree (relative path -> bytes), packages.json included."""
    files = sorted(files, key=lambda f: f.filename)
    by_channel = channels(files)
    pages = channel_pages(by_channel, "Simple index")
    pages["flat/index.html"] = page("All wheels", (file_link(f, "../") for f in files))
    pages["index.html"] = page("Channels", [*(f'<a href="{ch}/">{ch}</a>' for ch in by_channel),
                                            f'<a href="{FIND_PAGE}">Find a wheel for your GPU</a>'],
                               head='    <meta name="viewport" content="width=device-width, initial-scale=1">\n')
    doc = packages_json(files, by_channel)
    pages[PACKAGES_JSON] = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    return pages


def listed(doc: object) -> set[tuple[str, str]]:
    """(channel, project) pairs a packages.json lists."""
    chans = doc.get("channels") if isinstance(doc, Mapping) else None
    if not isinstance(chans, Mapping):
        return set()
    return {(ch, p) for ch, projects in chans.items() if isinstance(projects, Mapping) for p in projects}


def refuse_lost(old: Mapping[str, Any], new: Mapping[str, Any], allow_drop: Iterable[str], what: str,
                where: Path) -> None:
    """Refuse pages that would no longer list a (channel, project) ``old`` listed, unless
    ``allow_drop`` names the project: a lost project breaks every environment that installs from it."""
    allowed = {canonicalize_name(p) for p in allow_drop}
    lost = sorted(f"{ch}/{p}" for ch, p in listed(old) - listed(new) if p not in allowed)
    if lost:
        raise DefectError(f"{what} would no longer list {len(lost)} project page(s) it listed before: "
                          + ", ".join(lost), where=str(where),
                          hint="restore the missing wheels under files/ (and their ledger entries), or name each "
                               "project with --allow-drop if removing it is intended")


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
def _atomic_write(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    atomic_write(path, [data], mode=0o644)


def _atomic_copy(src: Path, dst: Path, sha256: str) -> None:
    """Copy ``src`` to ``dst`` only if its bytes still have the sha256 the gate checked."""
    def verified() -> Iterator[bytes]:
        digest = hashlib.sha256()
        for chunk in read_chunks(src):
            digest.update(chunk)
            yield chunk
        if digest.hexdigest() != sha256:  # raised before the rename: nothing is stored
            raise DefectError(f"{src.name} changed after the gate checked it: sha256 {digest.hexdigest()}, "
                              f"not {sha256}", where=str(src), hint="run the upload again on files nothing else writes")

    atomic_write(dst, verified(), mode=0o644)


MAX_PACKAGES_JSON = 256 << 20  # one line per project and wheel: tens of MB at the farm's scale


def read_packages_json(root: Path) -> dict[str, Any]:
    path = Path(root) / PACKAGES_JSON
    if not path.exists():
        return {}
    try:
        doc = jsonread.load_file(path, MAX_PACKAGES_JSON)
    except ValueError as exc:
        raise UsageError(f"not JSON farm wrote: {exc}", where=str(path),
                         hint="restore it from the published index; it records what was listed") from None
    return doc if isinstance(doc, dict) else {}


def stored(root: Path, filename: str, lookup: EntryLookup) -> IndexFile:
    """An :class:`IndexFile` for ``files/<filename>``, checked against its ledger entry."""
    path = Path(root) / FILES / filename
    recorded = lookup(filename)
    if recorded is None:
        raise LedgerError(f"{FILES}/{filename} is in the index but not in the ledger", where=str(root),
                          hint="merge its fragment into the ledger, `farm backfill` it, or remove the file")
    sha = sha256_file(path)
    if sha != recorded:
        raise DefectError(f"{FILES}/{filename} has sha256 {sha}, the ledger records {recorded}",
                          where=str(root), hint="the stored file changed: restore the published wheel")
    meta_path = path.with_name(filename + ".metadata")
    metadata = meta_path.read_bytes() if meta_path.exists() else None
    return describe(filename, sha, path.stat().st_size, metadata)


@dataclass(frozen=True)
class IndexReport:
    root: Path
    files: int
    channels: tuple[str, ...]
    written: tuple[str, ...]  # pages whose bytes changed
    removed: tuple[str, ...]


def write_pages(root: Path, pages: Mapping[str, bytes], old: Mapping[str, Any], new: Mapping[str, Any]) -> IndexReport:
    written = []
    for folder in {(root / rel).parent for rel in pages}:  # pages a killed regeneration left half-written
        sweep_leftovers(folder)
    for rel, data in sorted(pages.items(), key=lambda kv: kv[0] == PACKAGES_JSON):  # packages.json last
        path = root / rel
        if not (path.exists() and path.read_bytes() == data):
            written.append(rel)
        _atomic_write(path, data)
    removed = []
    for ch, project in sorted(listed(old) - listed(new)):
        page_dir = root / ch / project
        if (page_dir / "index.html").exists():
            shutil.rmtree(page_dir)
            removed.append(f"{ch}/{project}")
    gone = set(old.get("channels") or {}) - set(new.get("channels") or {})
    for ch in sorted(gone, key=lambda c: -c.count("/")):  # deepest first: cu128/torch2.8 before cu128
        (root / ch / "index.html").unlink(missing_ok=True)
        for directory in (root / ch, (root / ch).parent):
            if directory != root and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
        removed.append(f"{ch}/")
    return IndexReport(root, len(new.get("files", {})), tuple(new.get("channels", {})), tuple(written), tuple(removed))


def locked(root: Path) -> Any:
    """One writer per tree at a time (two upload jobs, or an upload and `farm index`)."""
    root.mkdir(parents=True, exist_ok=True)
    return FileLock(str(root / ".lock"), timeout=300)


def regenerate(root: Path, lookup: EntryLookup, *, allow_drop: Iterable[str] = (),
               remote: Iterable[IndexFile] = (), create: bool = False, attested: Attested | None = None) -> IndexReport:
    """Rewrite every page of the tree at ``root`` from ``files/`` and the ledger.

    ``remote``: wheels the tree lists without storing them (see :func:`linked`); a stored file
    of the same name wins. ``create``: the tree may not exist yet. ``attested``: the ledger's
    attestation of a file name, which the compatibility pages show."""
    root = Path(root)
    remote = list(remote)
    if not create and not (root / FILES).is_dir() and not (root / PACKAGES_JSON).exists():
        raise UsageError("not an index tree (no files/ and no packages.json)", where=str(root),
                         hint="pass the folder a publish target of kind index writes to")
    with locked(root):
        return _regenerate(root, lookup, allow_drop=allow_drop, remote=remote, attested=attested)


def _regenerate(root: Path, lookup: EntryLookup, *, allow_drop: Iterable[str] = (),
                add: Iterable[IndexFile] | None = None, remote: Iterable[IndexFile] = (),
                attested: Attested | None = None) -> IndexReport:
    """With ``add`` (files about to be stored) the pages are computed and checked, and nothing is
    written: :func:`publish_each` checks them before copying anything."""
    files_dir = root / FILES
    names = sorted(p.name for p in files_dir.glob("*.whl")) if files_dir.is_dir() else []
    files = {f.filename: f for f in remote}
    files.update({n: stored(root, n, lookup) for n in names})
    for f in add or ():
        files[f.filename] = f
    pages = render(files.values())
    old = read_packages_json(root)
    new = json.loads(pages[PACKAGES_JSON])
    refuse_lost(old, new, allow_drop, "the regenerated index", root)
    if add is not None:
        return IndexReport(root, len(files), tuple(new["channels"]), (), ())
    # beside the PEP 503 pages, never in them
    pages.update(compat.render(compat.provenance(files_dir, files.values(), attested)))
    report = write_pages(root, pages, old, new)
    compat.prune(root, pages)
    return report


@dataclass(frozen=True)
class IndexUpload:
    filename: str
    url: str
    action: str  # "stored" or "present" (same name, same sha256 already there: a no-op)


def url_of(filename: str, base_url: str | None, folder: str = FILES) -> str:
    rel = f"{folder}/{quote(filename)}"
    return f"{base_url.rstrip('/')}/{rel}" if base_url else rel


def _classify(root: Path, path: Path, sha: str, base_url: str | None
              ) -> tuple[IndexUpload | None, tuple[Path, str, bytes] | None, str | None]:
    """One wheel: already stored (the same bytes), to store (with its METADATA), or refused
    (another file under its name, or no METADATA) with the reason."""
    dst = root / FILES / path.name
    if dst.exists():
        have = sha256_file(dst)
        if have != sha:
            return None, None, f"{path.name}: the index holds sha256 {have}, this wheel has {sha}"
        return IndexUpload(path.name, url_of(path.name, base_url), "present"), None, None
    metadata = read_member(path, "METADATA")
    if metadata is None:
        return None, None, f"{path.name}: no .dist-info/METADATA"
    return IndexUpload(path.name, url_of(path.name, base_url), "stored"), (path, sha, metadata), None


def _store(root: Path, plan: list[tuple[Path, str, bytes]]) -> None:
    sweep_leftovers(root / FILES)  # copies a killed upload left behind (never served: hidden names)
    for path, sha, metadata in plan:
        # .metadata first: a page never links a wheel whose metadata is missing.
        meta = root / FILES / (path.name + ".metadata")
        _atomic_write(meta, metadata)
        try:
            _atomic_copy(path, root / FILES / path.name, sha)
        except BaseException:
            meta.unlink(missing_ok=True)
            raise


@dataclass(frozen=True)
class IndexBatch:
    """What one publish did to the tree, wheel by wheel: ``uploads`` stored or already there,
    ``refused``: (file name, reason) of each wheel the tree cannot take."""

    uploads: tuple[IndexUpload, ...]
    refused: tuple[tuple[str, str], ...]
    report: IndexReport | None


def publish_each(root: Path, wheels: Iterable[tuple[Path, str]], lookup: EntryLookup, *,
                 base_url: str | None = None, dry_run: bool = False, attested: Attested | None = None) -> IndexBatch:
    """Store each of ``(path, sha256)`` wheels that the tree can take, refuse each that it
    cannot (another file under its name, no METADATA) with its reason, and regenerate the tree
    once. One wheel's refusal never stops another's; a regeneration that would lose a project
    (the tree's own state, not a wheel's) raises before anything is stored."""
    root = Path(root)
    wheels = list(wheels)

    def classify() -> tuple[list[IndexUpload], list[tuple[Path, str, bytes]], list[tuple[str, str]]]:
        out: list[IndexUpload] = []
        plan: list[tuple[Path, str, bytes]] = []
        refused: list[tuple[str, str]] = []
        for path, sha in wheels:
            upload, store, refusal = _classify(root, path, sha, base_url)
            if refusal is not None:
                refused.append((path.name, refusal))
                continue
            assert upload is not None
            out.append(upload)
            if store is not None:
                plan.append(store)
        return out, plan, refused

    if dry_run and not root.exists():
        out, _, refused = classify()
        return IndexBatch(tuple(out), tuple(refused), None)
    with locked(root):
        out, plan, refused = classify()
        if not plan:  # nothing to store: the tree is left as it is
            return IndexBatch(tuple(out), tuple(refused), None)
        # the tree's pages with the new wheels, computed and checked: raises before anything is copied
        _regenerate(root, lookup, add=[describe(path.name, sha, path.stat().st_size, metadata)
                                       for path, sha, metadata in plan])
        if dry_run:
            return IndexBatch(tuple(out), tuple(refused), None)
        _store(root, plan)
        return IndexBatch(tuple(out), tuple(refused), _regenerate(root, lookup, attested=attested))
