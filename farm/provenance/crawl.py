"""Where the wheels to audit are: a folder, a wheel file, a simple-API index, or the ledger's
published URLs; index wheels are streamed one at a time through a bounded scratch folder, and a
fleet can be split into shards that together see each wheel once.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from farm.errors import NetworkError, TooLarge, ToolError, UsageError, WheelError
from farm.fsutil import sweep_dead_dirs, temp_dir_prefix
from farm.netutil import download, read_page
from farm.provenance.ledger import iter_entries

# Nothing a real index serves is larger: GitHub caps an asset below 2 GiB.
MAX_WHEEL_BYTES = 2 << 30


def index_wheels(url: str, *, max_depth: int = 4, timeout: float = 60.0) -> list[tuple[str, str | None]]:
    """(wheel URL, sha256 from the page or None) for every wheel under a simple-API index ``url``
    (PEP 503 or PEP 691): pages are followed below ``url`` only, at most ``max_depth`` levels deep."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise UsageError(f"{url!r} is not an http(s) index URL")
    base = url if url.endswith("/") else url + "/"
    seen_pages: set[str] = set()
    wheels: dict[str, str | None] = {}
    pending = [(base, 0)]
    while pending:
        page, depth = pending.pop()
        if page in seen_pages:
            continue
        seen_pages.add(page)
        try:
            listing = read_page(page, timeout=timeout)
        except TooLarge as exc:
            raise WheelError(f"index page larger than {exc.cap >> 20} MiB", where=page,
                             hint="point the audit at a PEP 503 index (project pages of links)") from None
        except NetworkError as exc:
            raise ToolError(f"cannot fetch {page}: {exc.message}",
                            hint="check the index URL and the network") from None
        except ValueError as exc:
            raise WheelError(f"not a simple-API page: {exc}", where=page,
                             hint="point the audit at a PEP 503 index (project pages of links)") from None
        for file in listing.files:
            if PurePosixPath(urllib.parse.urlsplit(file.url).path).name.endswith(".whl"):
                wheels.setdefault(file.url, file.sha256)
        pending.extend((sub, depth + 1) for sub in listing.pages if sub.startswith(base) and depth < max_depth)
    return sorted(wheels.items())


def _download(url: str, dest: Path, timeout: float, cap: int) -> str:
    """Stream ``url`` to ``dest``; return its sha256. Stops (a :class:`WheelError`) past ``cap``
    bytes, so the scratch folder never holds more than that."""
    try:
        return download(url, dest, max_bytes=cap, timeout=timeout).sha256
    except TooLarge:
        raise WheelError(f"larger than {_human(cap)}: "
                         + ("not a wheel any target publishes" if cap == MAX_WHEEL_BYTES
                            else "more than the audit's scratch space (--max-scratch)"),
                         where=url, hint="check what the index links to, or give the audit more scratch") from None
    except NetworkError as exc:
        raise ToolError(f"cannot download {url}: {exc.message}", hint="check the index and the network") from None


def _human(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and n % (1 << 30) == 0 else f"{n:,} bytes"


@dataclass(frozen=True)
class Located:
    path: Path
    location: str
    problem: str | None = None


@dataclass(frozen=True)
class Shard:
    """``I/N``: this audit judges the wheels whose sha256 (or file name, when the sha256 is not
    known before downloading) falls in bucket I of N; N audits together judge each wheel once."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        try:
            i, n = (int(x) for x in text.split("/"))
        except ValueError:
            raise UsageError(f"--shard {text!r}: write it as I/N, e.g. 0/4") from None
        if not (n >= 1 and 0 <= i < n):
            raise UsageError(f"--shard {text!r}: need 0 <= I < N", hint="the shards of N audits are 0/N ... N-1/N")
        return cls(i, n)

    def takes(self, sha256: str | None, name: str) -> bool:
        if self.count == 1:
            return True
        key = sha256 or hashlib.sha256(name.encode()).hexdigest()
        return int(key[:12], 16) % self.count == self.index


class Scratch:
    """Where downloaded wheels wait to be judged: one at a time, each deleted after its verdict,
    at most ``limit`` bytes each. ``peak`` is the most bytes the folder ever held, measured on disk
    after each download, so the bound is observed rather than assumed."""

    def __init__(self, parent: Path | None = None, limit: int | None = None) -> None:
        self.parent, self.limit, self.peak, self.downloads = parent, limit, 0, 0

    @property
    def cap(self) -> int:
        return MAX_WHEEL_BYTES if self.limit is None else min(self.limit, MAX_WHEEL_BYTES)

    def observe(self, folder: Path) -> None:
        self.downloads += 1
        self.peak = max(self.peak, sum(f.stat().st_size for f in folder.iterdir() if f.is_file()))


def _stream(items: Iterable[tuple[str, str | None]], scratch: Scratch, timeout: float,
            shard: Shard | None) -> Iterator[Located]:
    """Download each (URL, sha256 or None) into a private folder, yield it, delete it after use:
    a sweep over thousands of wheels needs the disk of one."""
    if scratch.parent is not None:
        scratch.parent.mkdir(parents=True, exist_ok=True)
    parent = scratch.parent or Path(tempfile.gettempdir())
    sweep_dead_dirs(parent, "farm-audit")  # the downloads of a killed audit
    tmp = Path(tempfile.mkdtemp(prefix=temp_dir_prefix("farm-audit"), dir=parent))
    try:
        for url, sha256 in items:
            name = urllib.parse.unquote(PurePosixPath(urllib.parse.urlsplit(url).path).name)
            if shard is not None and not shard.takes(sha256, name):
                continue
            if not name or name.startswith(".") or any(c in name for c in "/\\\0"):
                # "..%2F..%2Fx.whl" must not become a path outside tmp: not even downloaded.
                dest = tmp / "unsafe-file-name.whl"
                dest.touch()
                yield Located(dest, url, f"the index links a file named {name!r}, which is not a plain "
                                         "file name")
            else:
                dest = tmp / name
                try:
                    got = _download(url, dest, timeout, scratch.cap)
                except WheelError as exc:  # oversized: a finding about this link, not the end of the audit
                    dest.write_bytes(b"")
                    yield Located(dest, url, exc.message)
                else:
                    scratch.observe(tmp)
                    problem = (f"the index says sha256 {sha256}, the served file is {got}"
                               if sha256 and sha256 != got else None)
                    yield Located(dest, url, problem)
            dest.unlink(missing_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ledger_urls(path: Path) -> Iterator[tuple[str, str]]:
    """(URL, sha256) of every wheel the ledger records as published over http(s): the fleet,
    read from the ledger line by line (the first http(s) place of each wheel)."""
    for _, entry in iter_entries(path):  # the ledger's own keys only: no build info is read
        for place in entry.get("published") or ():
            url = place.get("url", "")
            if url.startswith(("http://", "https://")):
                yield url, entry["sha256"]
                break


def iter_wheels(where: str, *, timeout: float = 60.0, shard: Shard | None = None,
                scratch: Scratch | None = None) -> Iterator[Located]:
    """Every wheel under a folder (recursively), a single wheel file, or a PEP 503 index URL (its
    wheels downloaded one at a time: :func:`_stream`)."""
    if where.startswith(("http://", "https://")):
        yield from _stream(index_wheels(where, timeout=timeout), scratch or Scratch(), timeout, shard)
        return
    path = Path(where)
    if path.is_file() and path.suffix == ".whl":
        wheels = [path]
    elif path.is_dir():
        wheels = sorted(path.rglob("*.whl"))
    else:
        raise UsageError(f"{where}: not a wheel, a folder or an http(s) index URL",
                         hint="pass a folder of wheels, a .whl file or an index URL")
    yield from (Located(wheel, str(wheel)) for wheel in wheels if shard is None or shard.takes(None, wheel.name))


def fleet_wheels(ledger_path: Path, *, timeout: float = 60.0, shard: Shard | None = None,
                 scratch: Scratch | None = None) -> Iterator[Located]:
    """Every wheel the ledger says was published over http(s), downloaded one at a time."""
    yield from _stream(ledger_urls(ledger_path), scratch or Scratch(), timeout, shard)
