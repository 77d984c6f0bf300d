"""Reading wheels safely: every entry is checked before any byte is extracted.

Refused (as :class:`~farm.errors.WheelError`): entry names with ``..`` or absolute/drive paths,
duplicate names, symlinks whose target leaves the archive, entries whose data overlaps another's
(the overlapping-file zip bomb), and decompression bombs (a total or per-entry size or ratio above
the limits). Extraction streams in chunks and stops at the declared size, so a lying header cannot
write more than it claims.
"""

from __future__ import annotations

import contextlib
import hashlib
import lzma
import posixpath
import re
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self

from farm.errors import WheelError

_CHUNK = 1 << 20
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_LOCAL_MAGIC = 0x04034B50
_EXTENSION = re.compile(r"\.(so|pyd)$")
_READABLE_COMPRESSION = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA})


@dataclass(frozen=True)
class Limits:
    """What a wheel may claim before it is treated as a decompression bomb."""

    max_total: int = 16 << 30  # 16 GiB uncompressed (the largest CUDA wheels are ~3 GiB)
    max_member: int = 8 << 30
    max_ratio: float = 1000.0  # uncompressed / compressed, for members above ratio_floor
    ratio_floor: int = 64 << 20


DEFAULT_LIMITS = Limits()


def _refuse(path: Path, message: str, hint: str = "the wheel is malformed or hostile; do not install it") -> WheelError:
    return WheelError(message, where=str(path), hint=hint)


def is_vendored(name: str) -> bool:
    """Libraries auditwheel/delvewheel vendor into ``<dist>.libs/`` (or ``*.libs/`` anywhere)."""
    return any(part.endswith(".libs") for part in PurePosixPath(name).parts[:-1])


def is_shared_object(name: str) -> bool:
    base = PurePosixPath(name).name
    return bool(_EXTENSION.search(base)) or ".so." in base


class SafeWheel:
    """A wheel opened for reading, validated as a whole on entry.

    ``with SafeWheel(path) as wheel: wheel.extension_members()``.
    """

    def __init__(self, path: Path, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.path = Path(path)
        self.limits = limits
        self._zip: zipfile.ZipFile | None = None
        self._infos: dict[str, zipfile.ZipInfo] = {}

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Self:
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            raise WheelError("no such file", where=str(self.path), hint="check the path") from None
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise _refuse(self.path, f"not a readable zip archive ({exc})",
                          "a wheel is a zip file; rebuild or re-download it") from None
        try:
            self._validate()
        except BaseException:
            self._zip.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None

    @property
    def zip(self) -> zipfile.ZipFile:
        if self._zip is None:
            raise RuntimeError("SafeWheel used outside its `with` block")
        return self._zip

    # -- validation -------------------------------------------------------------------------
    def _validate(self) -> None:
        infos = self.zip.infolist()
        total = 0
        for info in infos:
            name = info.filename
            self._check_name(name)
            if name in self._infos:
                raise _refuse(self.path, f"duplicate entry {name!r}")
            self._infos[name] = info
            # zipfile raises RuntimeError / NotImplementedError on these mid-read: refuse up front.
            if info.flag_bits & 0x1:
                raise _refuse(self.path, f"entry {name!r} is encrypted")
            if info.compress_type not in _READABLE_COMPRESSION:
                raise _refuse(self.path, f"entry {name!r} uses zip compression method {info.compress_type}, "
                                         "which cannot be read (wheels use deflate or stored)")
            if info.file_size > self.limits.max_member:
                raise _refuse(self.path, f"entry {name!r} claims {info.file_size} bytes uncompressed "
                                         f"(limit {self.limits.max_member}): a decompression bomb")
            if (info.file_size > self.limits.ratio_floor
                    and info.file_size > self.limits.max_ratio * max(info.compress_size, 1)):
                raise _refuse(self.path, f"entry {name!r} expands {info.compress_size} -> {info.file_size} bytes "
                                         f"(ratio above {self.limits.max_ratio:.0f}): a decompression bomb")
            total += info.file_size
            if total > self.limits.max_total:
                raise _refuse(self.path, f"entries claim more than {self.limits.max_total} bytes uncompressed "
                                         "in total: a decompression bomb")
        self._check_overlaps(infos)
        for info in infos:
            if self._is_symlink(info):
                self._check_link(info)

    def _check_name(self, name: str) -> None:
        if not name or "\0" in name or "\\" in name:
            raise _refuse(self.path, f"entry name {name!r} is not a clean relative path")
        if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
            raise _refuse(self.path, f"entry {name!r} has an absolute path")
        if ".." in PurePosixPath(name).parts:
            raise _refuse(self.path, f"entry {name!r} has a '..' component")

    def _check_overlaps(self, infos: list[zipfile.ZipInfo]) -> None:
        """Each entry's data must end before the next entry's local header starts."""
        size = self.path.stat().st_size
        ordered = sorted(infos, key=lambda i: i.header_offset)
        with self.path.open("rb") as fh:
            for i, info in enumerate(ordered):
                fh.seek(info.header_offset)
                raw = fh.read(_LOCAL_HEADER.size)
                if len(raw) != _LOCAL_HEADER.size or _LOCAL_HEADER.unpack(raw)[0] != _LOCAL_MAGIC:
                    raise _refuse(self.path, f"entry {info.filename!r}: no local header at {info.header_offset}")
                name_len, extra_len = _LOCAL_HEADER.unpack(raw)[9:11]
                data_end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
                limit = ordered[i + 1].header_offset if i + 1 < len(ordered) else size
                if data_end > limit:
                    raise _refuse(self.path, f"entry {info.filename!r} overlaps the next entry "
                                             "(an overlapping-entry zip bomb, or a truncated wheel)")

    @staticmethod
    def _is_symlink(info: zipfile.ZipInfo) -> bool:
        return info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16)

    def _check_link(self, info: zipfile.ZipInfo) -> None:
        if info.file_size > 4096:
            raise _refuse(self.path, f"symlink {info.filename!r} has a {info.file_size}-byte target")
        target = b"".join(self._stream(info.filename)).decode("utf-8", "replace")
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(info.filename), target))
        if target.startswith("/") or "\0" in target or joined == ".." or joined.startswith("../"):
            raise _refuse(self.path, f"symlink {info.filename!r} points outside the wheel ({target!r})")

    # -- listing ----------------------------------------------------------------------------
    def names(self) -> list[str]:
        return list(self._infos)

    def is_symlink(self, name: str) -> bool:
        return self._is_symlink(self._info(name))

    def extension_members(self) -> list[str]:
        """The extension modules (``.so``/``.pyd``), vendored ``*.libs/`` apart, links skipped."""
        return [n for n in self._infos if is_shared_object(n) and not is_vendored(n) and not self.is_symlink(n)]

    def vendored_members(self) -> list[str]:
        return [n for n in self._infos if is_shared_object(n) and is_vendored(n) and not self.is_symlink(n)]

    def dist_info(self) -> str | None:
        """The ``.dist-info`` directory name, when the wheel has exactly one."""
        found = {PurePosixPath(n).parts[0] for n in self._infos if PurePosixPath(n).parts[0].endswith(".dist-info")}
        return found.pop() if len(found) == 1 else None

    def _info(self, name: str) -> zipfile.ZipInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise WheelError(f"no entry {name!r}", where=str(self.path)) from None

    # -- reading ----------------------------------------------------------------------------
    def _stream(self, name: str) -> Iterator[bytes]:
        info = self._info(name)
        written = 0
        try:
            with self.zip.open(info) as src:
                while chunk := src.read(_CHUNK):
                    written += len(chunk)
                    if written > info.file_size:
                        raise _refuse(self.path, f"entry {name!r} inflates past its declared size {info.file_size}")
                    yield chunk
        # CRC mismatch, truncated data, a corrupt compressed stream
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise _refuse(self.path, f"entry {name!r} is corrupt ({exc})",
                          "rebuild or re-download the wheel") from None

    def read(self, name: str) -> bytes:
        return b"".join(self._stream(name))

    def sha256(self, name: str) -> str:
        """The hex sha256 of member ``name``'s bytes, streamed."""
        digest = hashlib.sha256()
        for chunk in self._stream(name):
            digest.update(chunk)
        return digest.hexdigest()

    def extract(self, name: str, dest: Path) -> Path:
        """Write member ``name`` to the file ``dest`` (a complete file or nothing)."""
        dest = Path(dest)
        tmp = dest.with_name(dest.name + ".part")
        try:
            with tmp.open("wb") as out:
                for chunk in self._stream(name):
                    out.write(chunk)
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)
        return dest

    @contextlib.contextmanager
    def extracted(self, name: str) -> Iterator[Path]:
        """Member ``name`` in a private temporary file, removed afterwards."""
        tmpdir = Path(tempfile.mkdtemp(prefix="farm-wheel-"))
        try:
            yield self.extract(name, tmpdir / PurePosixPath(name).name)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
