"""The ledger index's cache: a ledger that has not changed is not parsed again.

Parsing is most of ``farm matrix``'s time at the public farm's scale (52 MB of JSON). The cache keeps
the validated records, keyed by the file's stamp (:mod:`farm.filestamp`; farm's own writers replace
the file, a new inode) and the code that validated them. A ledger written in the last ``RACY_NS`` is
not cached. The cache is only ever an optimisation: one that cannot be read or written is ignored,
and one not sealed with this user's key (:mod:`farm.cacheseal`: a CI cache restore may bring back
anything a branch saved) is never believed: the ledger is parsed instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

import msgspec

from farm import cacheseal
from farm.errors import FileSystemError
from farm.filestamp import RACY_NS, Stamp, stamp
from farm.provenance.ledgerline import Record

_CACHE_FORMAT = 1
_MAX_CACHE_BYTES = 1 << 30  # ~250 bytes a record: four million records
_RULES = ("shape.py", "buildinfo.py", "ledgerline.py", "ledger.py")
_RACY_NS = RACY_NS  # module-level, so a test can close the window


class _Cache(msgspec.Struct, array_like=True):
    format: int
    code: str  # _code_digest()
    stamp: Stamp
    records: list[Record]


def _cache_file(cache_dir: Path, path: Path) -> Path:
    name = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:32]
    return Path(cache_dir) / "ledger-index" / f"{name}.msgpack"


def _code_digest() -> str:
    """Digest of the modules that define, validate and index a line: changed rules invalidate
    every cache. Read as files: the index module imports this one."""
    digest = hashlib.sha256()
    for name in _RULES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def read_cache(cache_dir: Path, path: Path) -> list[Record] | None:
    """The cached index of ``path`` when the file and the code are the ones it was made from."""
    try:
        current = stamp(path.stat())
        file = _cache_file(cache_dir, path)
        raw = cacheseal.read(file, f"ledger-index:{file.name}", _MAX_CACHE_BYTES)
        if raw is None:  # written by someone else, or edited: read the ledger
            return None
        cache = msgspec.msgpack.decode(raw, type=_Cache)
        if cache.format != _CACHE_FORMAT or cache.stamp != current or cache.code != _code_digest():
            return None
    except (OSError, ValueError, msgspec.MsgspecError):  # unreadable, too large: read the ledger
        return None
    return cache.records


def write_cache(cache_dir: Path, path: Path, read_as: Stamp, records: list[Record]) -> None:
    """Keep ``records``, the index of ``path`` as it was when stamped ``read_as``."""
    if time.time_ns() - max(read_as[1], read_as[2]) < _RACY_NS:
        return
    # not durable: a cache lost to a crash is rebuilt by the next run
    with contextlib.suppress(OSError, FileSystemError):
        cache = _Cache(_CACHE_FORMAT, _code_digest(), read_as, records)
        file = _cache_file(cache_dir, path)
        cacheseal.write(file, msgspec.msgpack.encode(cache), f"ledger-index:{file.name}")

