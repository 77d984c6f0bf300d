"""Relabel and stamp a wheel in one streaming rewrite.

The farm name of a wheel carries its cell (``+cu128torch2.8``) and, when the effective epoch is
above 0, a build tag, so a rebuild never collides with an old asset and installers prefer it.
pip rejects a wheel whose file name, ``.dist-info`` folder and METADATA ``Version`` disagree
("inconsistent version"), so all three change together; ``_build_info.json`` is added and RECORD regenerated.

Every member is streamed in chunks while it is hashed, so memory does not grow with the wheel.
The new wheel is written to a temporary file in the output folder and renamed into place only
when complete: the input is never touched and a crash leaves no file under the final name.
"""

from __future__ import annotations

import base64
import csv
import errno
import hashlib
import io
import lzma
import os
import re
import stat
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from farm.binary.wheelfile import SafeWheel
from farm.errors import UsageError, WheelError
from farm.fsutil import fsync_dir, sha256_file, sweep_leftovers, temp_prefix, writing
from farm.provenance import buildinfo

_CHUNK = 1 << 20
# METADATA and WHEEL are read whole to be edited; anything larger is not a real one.
_SMALL_LIMIT = 16 << 20
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_LOCAL = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*$")

# The object itself, or a function of (relabel, sha256 of every new member) that makes it.
BuildInfoSource = buildinfo.BuildInfo | Callable[["Relabel", Mapping[str, str]], buildinfo.BuildInfo] | None


# -- names ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WheelName:
    """The five (or six) fields of a wheel file name, spelled as in the file."""

    dist: str
    version: str
    build: str | None
    python: str
    abi: str
    platform: str

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        if not filename.endswith(".whl"):
            raise WheelError(f"{filename!r} is not a wheel file name (no .whl)")
        try:
            parse_wheel_filename(filename)  # packaging's rules: the fields, the version, the build tag
        except (InvalidWheelFilename, InvalidVersion) as exc:
            raise WheelError(
                f"{filename!r} is not a wheel file name ({exc})",
                hint="expected {dist}-{version}[-{build}]-{python}-{abi}-{platform}.whl",
            ) from None
        # Valid, so it has five or six dash-separated fields; kept as spelled (a relabel
        # rewrites only the version, and the tags must stay byte for byte).
        dist, version, *build, py, abi, plat = filename[: -len(".whl")].split("-")
        return cls(dist, version, build[0] if build else None, py, abi, plat)

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{self.dist}-{self.version}{build}-{self.python}-{self.abi}-{self.platform}.whl"

    @property
    def public_version(self) -> str:
        """The version without any local label, spelled as in the file name."""
        return self.version.split("+", 1)[0]

    @property
    def local(self) -> str | None:
        return self.version.split("+", 1)[1] if "+" in self.version else None


@dataclass(frozen=True)
class Relabel:
    """How one wheel's names change: file name, ``.dist-info`` and ``.data`` folders."""

    new: WheelName
    old_dist_info: str
    new_dist_info: str
    old_data: str
    new_data: str

    def member(self, name: str) -> str:
        """The archive path ``name`` gets in the relabelled wheel."""
        for old, new in ((self.old_dist_info, self.new_dist_info), (self.old_data, self.new_data)):
            if name == old or name.startswith(old + "/"):
                return new + name[len(old):]
        return name


def plan_relabel(filename: str, members: list[str], *, local: str, build_tag: str | None) -> Relabel:
    """Pure: the new names for a wheel called ``filename`` holding ``members``."""
    if not _LOCAL.match(local):
        raise UsageError(f"{local!r} is not a valid local version label", hint="e.g. cu128torch2.8 or cu128")
    if build_tag is not None and not (build_tag[:1].isdigit() and re.fullmatch(r"[0-9A-Za-z_.]+", build_tag)):
        raise UsageError(f"build tag {build_tag!r} must start with a digit")
    old = WheelName.parse(filename)
    tops = {m.split("/", 1)[0] for m in members if "/" in m}
    want = canonicalize_name(old.dist)
    dist_infos = [
        t for t in tops
        if t.endswith(".dist-info") and canonicalize_name(t[: -len(".dist-info")].rsplit("-", 1)[0]) == want
    ]
    if len(dist_infos) != 1:
        found = sorted(t for t in tops if t.endswith(".dist-info"))
        raise WheelError(
            f"expected one {old.dist}-*.dist-info folder, found {found or 'none'}",
            where=filename,
            hint="the wheel is malformed; rebuild it",
        )
    old_dist_info = dist_infos[0]
    name_part, old_version = old_dist_info[: -len(".dist-info")].rsplit("-", 1)
    if Version(old_version).public != Version(old.version).public:
        raise WheelError(
            f"file name says version {old.version} but the folder is {old_dist_info}", where=filename
        )
    new_version = f"{old.public_version}+{local}"
    return Relabel(
        new=WheelName(old.dist, new_version, build_tag, old.python, old.abi, old.platform),
        old_dist_info=old_dist_info,
        new_dist_info=f"{name_part}-{new_version}.dist-info",
        old_data=f"{name_part}-{old_version}.data",
        new_data=f"{name_part}-{new_version}.data",
    )


# -- small-file edits (pure) --------------------------------------------------------------------
def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def set_metadata_version(text: str, version: str, *, where: str, requires: Sequence[str] = (),
                         pins: Sequence[str] = ()) -> str:
    """METADATA with its header ``Version`` replaced and ``Requires-Dist`` added for each of
    ``requires`` whose project the wheel does not require already; each of ``pins`` replaces every
    requirement of the wheel on its project (``torch==2.14.*`` for ``torch>=1.4``); the body is
    left alone."""
    nl = _newline(text)
    lines = text.split(nl)
    end = lines.index("") if "" in lines else len(lines)  # the body may quote "Version:" freely
    headers = lines[:end]
    at = next((i for i, line in enumerate(headers) if line.lower().startswith("version:")), None)
    if at is None:
        raise WheelError("METADATA has no Version header", where=where)
    headers[at] = f"Version: {version}"
    pinned = {canonicalize_name(Requirement(p).name) for p in pins}
    if pinned:
        headers = [line for line in headers if not (line.lower().startswith("requires-dist:")
                   and _requirement_name(line) in pinned)]
        headers += [f"Requires-Dist: {p}" for p in pins]
    have = set()
    for line in headers:
        if line.lower().startswith("requires-dist:"):
            value = line.split(":", 1)[1].strip()
            try:
                have.add(canonicalize_name(Requirement(value).name))
            except InvalidRequirement:
                raise WheelError(f"METADATA Requires-Dist {value!r} is not a requirement", where=where,
                                 hint="the wheel's metadata is malformed; fix the package's build") from None
    headers += [f"Requires-Dist: {r}" for r in requires if canonicalize_name(Requirement(r).name) not in have]
    return nl.join(headers + lines[end:])


def _requirement_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line.split(":", 1)[1].strip()).name)
    except InvalidRequirement:
        return None  # reported by the loop that follows


def set_wheel_build(text: str, build_tag: str | None) -> str:
    """WHEEL with its ``Build`` line replaced, added, or removed."""
    nl = _newline(text)
    lines = [ln for ln in text.split(nl) if not ln.lower().startswith("build:")]
    if build_tag is not None:
        # Before the first Tag; without one, after the last header (a line after the blank
        # line that ends the headers would be read as a body, not a header).
        end = len(lines)
        while end and lines[end - 1] == "":
            end -= 1
        at = next((i for i, ln in enumerate(lines) if ln.lower().startswith("tag:")), end)
        lines.insert(at, f"Build: {build_tag}")
    return nl.join(lines)


def _record_hash(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _record_text(rows: Sequence[tuple[str, str, str]]) -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue().encode()


def _parse_record(data: bytes, where: str) -> dict[str, tuple[str, str]]:
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise WheelError(f"RECORD is unreadable: {exc}", where=where) from exc
    out: dict[str, tuple[str, str]] = {}
    for n, row in enumerate(rows, 1):
        if not row:
            continue
        if len(row) != 3:
            raise WheelError(f"RECORD line {n} has {len(row)} fields, not 3", where=where)
        out[row[0]] = (row[1], row[2])
    return out


# -- the rewrite --------------------------------------------------------------------------------
@dataclass(frozen=True)
class StampResult:
    """The stamped wheel and what was learned while writing it."""

    path: Path
    sha256: str
    size: int
    build_info: buildinfo.BuildInfo | None
    # False when an identical file was already there (stamping again is a no-op)
    created: bool = True

    @property
    def filename(self) -> str:
        return self.path.name


def _new_info(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A fresh ZipInfo keeping what installers read: the file's type (a symlink), whether it is
    executable, system, time. Its other permission bits are 644 (755 when executable, or a
    folder): the build host's umask never reaches the wheel."""
    out = zipfile.ZipInfo(name, date_time=info.date_time)
    out.compress_type = info.compress_type
    mode = info.external_attr >> 16
    if mode:
        perms = 0o755 if mode & 0o111 or stat.S_ISDIR(mode) else 0o644
        out.external_attr = (stat.S_IFMT(mode) | perms) << 16 | (info.external_attr & 0xFFFF)
    else:
        out.external_attr = info.external_attr
    out.create_system = info.create_system
    out.comment = info.comment
    out.file_size = info.file_size  # lets zipfile decide on zip64 before streaming
    return out


class _Hashing:
    """sha256 plus the algorithm RECORD used, if another one."""

    def __init__(self, algorithm: str | None) -> None:
        self.sha256 = hashlib.sha256()
        self.other = hashlib.new(algorithm) if algorithm and algorithm != "sha256" else None
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        if self.other is not None:
            self.other.update(chunk)
        self.size += len(chunk)

    def record_value(self) -> str:
        h = self.other or self.sha256
        return f"{h.name}=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def _copy_member(src: zipfile.ZipFile, dst: zipfile.ZipFile, info: zipfile.ZipInfo, name: str,
                 algorithm: str | None, where: str) -> _Hashing:
    hashing = _Hashing(algorithm)
    with dst.open(_new_info(info, name), "w") as writer:
        try:
            with src.open(info) as reader:
                while chunk := reader.read(_CHUNK):
                    hashing.update(chunk)
                    writer.write(chunk)
        except (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:  # CRC mismatch, truncated data
            raise WheelError(f"member {info.filename!r} is corrupt ({exc})", where=where,
                             hint="rebuild or re-download the wheel") from None
    return hashing


_LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # signature ... file name length, extra field length
_RAW_CODECS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


def _transfer(raw: BinaryIO, dst: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, where: str,
              on_chunk: Callable[[bytes], None] | None = None) -> None:
    """Copy a member's compressed bytes from ``raw`` to ``dst`` as they are, under ``name``,
    handing each chunk to ``on_chunk``. zipfile's own writer is fed from here: the local header,
    the bytes, then its central directory entry when the archive closes (the sizes are known, so
    no data descriptor, and the bytes written do not depend on whether ``dst`` can seek)."""
    raw.seek(info.header_offset)
    head = raw.read(_LOCAL_HEADER.size)
    if len(head) != _LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
        raise WheelError(f"member {info.filename!r} has no local header at {info.header_offset:#x}", where=where,
                         hint="rebuild or re-download the wheel")
    name_len, extra_len = _LOCAL_HEADER.unpack(head)[-2:]
    raw.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    out = _new_info(info, name)
    out.CRC, out.compress_size, out.file_size = info.CRC, info.compress_size, info.file_size
    _start(dst, out)
    left = info.compress_size
    while left:
        chunk = raw.read(min(_CHUNK, left))
        if not chunk:
            raise WheelError(f"member {info.filename!r} is truncated", where=where,
                             hint="rebuild or re-download the wheel")
        left -= len(chunk)
        dst.fp.write(chunk)  # type: ignore[union-attr]
        if on_chunk is not None:
            on_chunk(chunk)
    _finish(dst, out)


def _start(dst: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    info.header_offset = dst.fp.tell()  # type: ignore[union-attr]
    dst.fp.write(info.FileHeader())  # type: ignore[union-attr]


def _finish(dst: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    dst.filelist.append(info)
    dst.NameToInfo[info.filename] = info
    dst.start_dir = dst.fp.tell()  # type: ignore[union-attr]


def _copy_raw(raw: BinaryIO, dst: zipfile.ZipFile, info: zipfile.ZipInfo, name: str,
              algorithm: str | None, where: str) -> _Hashing:
    """Copy a member's compressed bytes as they are, under ``name``, hashing what they inflate to.

    Verifying a member needs its content (RECORD hashes it), so it is inflated on the way, but
    never deflated again: inflating costs a fraction of deflating. The CRC and the size are
    checked too; a mismatch raises before the output is renamed into place.
    """
    inflate = zlib.decompressobj(-zlib.MAX_WBITS) if info.compress_type == zipfile.ZIP_DEFLATED else None
    hashing = _Hashing(algorithm)
    crc = 0

    def check(chunk: bytes) -> None:
        nonlocal crc
        data = chunk
        while data and hashing.size <= info.file_size:
            if inflate is not None:  # bounded output per call: a bomb cannot balloon memory
                try:
                    plain = inflate.decompress(data, _CHUNK)
                except zlib.error as exc:
                    raise WheelError(f"member {info.filename!r} is corrupt ({exc})", where=where,
                                     hint="rebuild or re-download the wheel") from None
                data = inflate.unconsumed_tail
            else:
                plain, data = data, b""
            crc = zlib.crc32(plain, crc)
            hashing.update(plain)

    _transfer(raw, dst, info, name, where, check)
    if (inflate is not None and not inflate.eof) or crc != info.CRC or hashing.size != info.file_size:
        raise WheelError(f"member {info.filename!r} is corrupt (CRC or size does not match its header)",
                         where=where, hint="rebuild or re-download the wheel")
    return hashing


def _put_stored(dst: zipfile.ZipFile, name: str, data: bytes, date_time: tuple[int, int, int, int, int, int]) -> None:
    """A new member, stored as is: no compressor, whose output may differ between zlib builds."""
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.create_system = 3  # zipfile's default depends on the OS that writes
    info.external_attr = 0o100644 << 16
    info.compress_type = zipfile.ZIP_STORED
    info.CRC, info.compress_size, info.file_size = zlib.crc32(data), len(data), len(data)
    _start(dst, info)
    dst.fp.write(data)  # type: ignore[union-attr]
    _finish(dst, info)


def _put_deflated(dst: zipfile.ZipFile, name: str, data: bytes,
                  date_time: tuple[int, int, int, int, int, int]) -> None:
    """A member farm writes into a stamped wheel (``_build_info.json``, RECORD)."""
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o100644 << 16
    dst.writestr(info, data)


def add_to_dist_info(src: Path, out: BinaryIO, name: str, data: bytes) -> None:
    """Write to ``out`` the wheel ``src`` with ``<dist-info>/<name>`` added and RECORD updated.

    Every other member's bytes are copied as they are and the two new members are stored, so
    the output is a function of the input's bytes and ``data`` alone, the same on every machine,
    and costs a copy (``src``'s bytes are trusted as they are: its sha256 is checked by the caller).
    """
    src = Path(src)
    where = str(src)
    with SafeWheel(src) as wheel, open(src, "rb") as raw:
        di = wheel.dist_info()
        if di is None:
            raise WheelError("expected exactly one .dist-info directory", where=where,
                             hint="rebuild the wheel; the wheel spec allows exactly one")
        names = set(wheel.names())
        added, record_name = f"{di}/{name}", f"{di}/RECORD"
        if added in names or record_name not in names:
            raise WheelError(f"{added} is there already" if added in names else f"{record_name} is missing",
                             where=where, hint="only a wheel farm stamped takes this")
        zin = wheel.zip
        rows = [(path, *fields) for path, fields in _parse_record(_read_small(zin, zin.getinfo(record_name), where),
                                                                  where).items() if path != record_name]
        rows += [(added, _record_hash(hashlib.sha256(data).digest()), str(len(data))), (record_name, "", "")]
        date_time = zin.getinfo(f"{di}/METADATA").date_time if f"{di}/METADATA" in names else (1980, 1, 1, 0, 0, 0)
        with zipfile.ZipFile(out, "w", allowZip64=True) as zout:
            for info in zin.infolist():
                if info.filename != record_name and not info.filename.endswith(_SIGNATURES):
                    _transfer(raw, zout, info, info.filename, where)
            _put_stored(zout, added, data, date_time)
            _put_stored(zout, record_name, _record_text(rows), date_time)


def _read_small(src: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> bytes:
    if info.file_size > _SMALL_LIMIT:
        raise WheelError(f"{info.filename} is {info.file_size} bytes: not a real one", where=where)
    try:
        return src.read(info)
    except (zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise WheelError(f"member {info.filename!r} is corrupt ({exc})", where=where,
                         hint="rebuild or re-download the wheel") from None


def stamp_wheel(
    src: Path,
    out_dir: Path,
    *,
    local: str,
    build_tag: str | None,
    build_info: BuildInfoSource = None,
    requires: Sequence[str] = (),
    pins: Sequence[str] = (),
) -> StampResult:
    """Write ``out_dir/<farm name>.whl``: ``src`` relabelled, stamped, RECORD regenerated.

    ``build_info`` is the :class:`~farm.provenance.buildinfo.BuildInfo`, or a function that makes it from the
    :class:`Relabel` and the sha256 of every member of the new wheel (keyed by new archive
    path), so extension hashes come from this one pass; the wheel gets its ``for_wheel()`` part, the
    result keeps the whole (the ledger's). The input's RECORD is checked while streaming: a wheel whose
    content does not match its own RECORD is refused rather than blessed with new hashes.
    An existing output with these very bytes makes this a no-op; one with other bytes is refused.
    """
    src = Path(src)
    out_dir = Path(out_dir)
    where = str(src)
    # SafeWheel refuses unsafe names, duplicates, outside links and bombs before any byte moves.
    with SafeWheel(src) as wheel:
        zin = wheel.zip
        infos = zin.infolist()
        names = [i.filename for i in infos]
        seen = set(names)
        relabel = plan_relabel(src.name, names, local=local, build_tag=build_tag)
        di = relabel.old_dist_info
        if f"{di}/{buildinfo.BUILD_INFO_NAME}" in seen:
            raise WheelError(
                f"already stamped: {di}/{buildinfo.BUILD_INFO_NAME} exists",
                where=where,
                hint="postbuild takes the builder's wheel, not one farm already stamped",
            )
        for required in ("METADATA", "WHEEL", "RECORD"):
            if f"{di}/{required}" not in seen:
                raise WheelError(f"{di}/{required} is missing", where=where)
        record = _parse_record(_read_small(zin, zin.getinfo(f"{di}/RECORD"), where), where)

        final = out_dir / relabel.new.filename
        with writing(final):
            out_dir.mkdir(parents=True, exist_ok=True)
            sweep_leftovers(out_dir)  # the .part of a killed stamp is never taken as output
        if final.resolve() == src.resolve():
            raise UsageError(f"output {final} would overwrite the input", hint="choose another --out folder")
        with writing(final):
            fd, tmp_name = tempfile.mkstemp(dir=out_dir, prefix=temp_prefix(relabel.new.filename), suffix=".part")
        tmp = Path(tmp_name)
        try:
            with writing(final), os.fdopen(fd, "w+b") as fh:
                info_obj = _rewrite(zin, src, infos, fh, relabel, record, build_info, requires, where, pins)
                fh.flush()
                os.fsync(fh.fileno())
            digest, size = sha256_file(tmp), tmp.stat().st_size
            tmp.chmod(0o644)
            # The rewrite is deterministic: stamping the same wheel again in the same build
            # makes the same bytes, and is a no-op. Other bytes under that name are refused.
            # A hard link publishes without clobbering, atomically, even against a parallel stamp.
            created = True
            try:
                os.link(tmp, final)
            except FileExistsError:
                created = False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                # a filesystem without hard links: check, then rename
                created = not final.exists()
                if created:
                    tmp.replace(final)
            tmp.unlink(missing_ok=True)
            if created:
                fsync_dir(out_dir)
            elif sha256_file(final) != digest:
                raise UsageError(f"{final} already exists with other content",
                                 hint="remove it to stamp again, or choose another --out folder")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return StampResult(final, digest, size, info_obj, created)


_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS})


def _rewrite(
    zin: zipfile.ZipFile,
    src: Path,
    infos: list[zipfile.ZipInfo],
    fh: Any,
    relabel: Relabel,
    record: Mapping[str, tuple[str, str]],
    build_info: BuildInfoSource,
    requires: Sequence[str],
    where: str,
    pins: Sequence[str] = (),
) -> buildinfo.BuildInfo | None:
    di = relabel.old_dist_info
    skip = {f"{di}/RECORD"} | {f"{di}/{s}" for s in _SIGNATURES}
    # The spec puts .dist-info last (installers may stream); RECORD closes it.
    body = [i for i in infos if not i.filename.startswith(di + "/")]
    meta = [i for i in infos if i.filename.startswith(di + "/") and i.filename not in skip]
    hashes: dict[str, str] = {}
    rows: list[tuple[str, str, str]] = []
    stamp_time = zin.getinfo(f"{di}/METADATA").date_time
    written: set[str] = set()

    def add(name: str, digest: bytes, size: int) -> None:  # a member of the new wheel, as RECORD lists it
        hashes[name] = digest.hex()
        rows.append((name, _record_hash(digest), str(size)))

    with zipfile.ZipFile(fh, "w", allowZip64=True) as zout, open(src, "rb") as raw:
        for info in body + meta:
            new_name = relabel.member(info.filename)
            if new_name in written:  # e.g. both demo-1.0.data/x and demo-1.0+cu128.data/x
                raise WheelError(f"{info.filename} would become {new_name}, which the wheel already holds",
                                 where=where, hint="the wheel is malformed or hostile; rebuild it")
            written.add(new_name)
            if info.is_dir():
                zout.writestr(_new_info(info, new_name), b"")
                continue
            claimed = record.get(info.filename)
            if not claimed or not claimed[0]:
                raise WheelError(f"{info.filename} is not hashed in RECORD", where=where,
                                 hint="the wheel is malformed; rebuild it")
            algorithm = claimed[0].split("=", 1)[0]
            if algorithm not in hashlib.algorithms_guaranteed:
                raise WheelError(f"RECORD uses unknown hash {algorithm!r} for {info.filename}", where=where)
            if info.filename in (f"{di}/METADATA", f"{di}/WHEEL"):
                data = _read_small(zin, info, where)
                hashing = _Hashing(algorithm)
                hashing.update(data)
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise WheelError(f"{info.filename} is not UTF-8 ({exc})", where=where) from None
                if info.filename.endswith("/METADATA"):
                    text = set_metadata_version(text, relabel.new.version, where=f"{where}:{info.filename}",
                                                requires=requires, pins=pins)
                else:
                    text = set_wheel_build(text, relabel.new.build)
                new_data = text.encode("utf-8")
                zout.writestr(_new_info(info, new_name), new_data)
                add(new_name, hashlib.sha256(new_data).digest(), len(new_data))
            else:  # stored and deflated copied as they are; bzip2 / lzma, rare in wheels, re-compressed
                hashing = (_copy_raw(raw, zout, info, new_name, algorithm, where) if info.compress_type in _RAW_CODECS
                           else _copy_member(zin, zout, info, new_name, algorithm, where))
                add(new_name, hashing.sha256.digest(), hashing.size)
            if hashing.record_value() != claimed[0] or (claimed[1] and claimed[1] != str(hashing.size)):
                raise WheelError(
                    f"{info.filename} does not match the wheel's own RECORD",
                    where=where,
                    hint="the wheel is corrupt or was edited after it was built; rebuild it",
                )
        info_obj: buildinfo.BuildInfo | None = None
        if build_info is not None:
            info_obj = build_info(relabel, dict(hashes)) if callable(build_info) else build_info
            data = info_obj.for_wheel().to_json()  # the build's own record (run, duration) is the ledger's
            name = f"{relabel.new_dist_info}/{buildinfo.BUILD_INFO_NAME}"
            _put_deflated(zout, name, data, stamp_time)
            add(name, hashlib.sha256(data).digest(), len(data))
        record_name = f"{relabel.new_dist_info}/RECORD"
        _put_deflated(zout, record_name, _record_text([*rows, (record_name, "", "")]), stamp_time)
    return info_obj

