"""Relabel + stamp in one streaming rewrite: names, RECORD, modes, links, atomicity."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from farm.errors import UsageError, WheelError
from farm.provenance import buildinfo, stamp
from farm.provenance.stamp import (
    WheelName,
    plan_relabel,
    set_metadata_version,
    set_wheel_build,
    stamp_wheel,
)
from tests.support.postbuildfix import PY
from tests.support.wheelmaker import make_wheel

SCRIPT = "demo_ext-0.1.0.data/scripts/demo-run"
DATA_LIB = "demo_ext-0.1.0.data/platlib/demo_ext_native.so"
LINK = "demo_ext/libdemo.so"



def provenance_n(n: int = 1) -> buildinfo.BuildInfo:
    """A provenance to stamp (``n`` tells two apart: stamping other content under one name)."""
    return buildinfo.inferred_build_info(dist="demo_ext", version="0.1.0",
                                         cell={"cuda": "12.8", "torch": None, "python": "cp311",
                                               "platform": "linux_x86_64"},
                                         found={}, extensions={f"demo_ext/v{n}.so": f"{n:064x}"})

def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def with_symlink(wheel: Path, name: str) -> Path:
    """Rewrite ``wheel`` so that member ``name`` (whose bytes are the link target) is a symlink."""
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename == name:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                info.create_system = 3
            zout.writestr(info, zin.read(info))
    tmp.replace(wheel)
    return wheel


@pytest.fixture
def source_wheel(tmp_path: Path) -> Path:
    """A wheel with a package, a .data/scripts executable, a .data/platlib file and a symlink."""
    files = {
        "demo_ext/__init__.py": b"VALUE = 1\n",
        "demo_ext/libdemo.so.1": b"\x7fELF not really\n" * 100,
        LINK: b"libdemo.so.1",
        SCRIPT: b"#!/bin/sh\necho demo\n",
        DATA_LIB: b"\x7fELF platlib\n",
    }
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", files, executables=(SCRIPT,))
    return with_symlink(wheel, LINK)


def members(path: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename: i for i in zf.infolist()}


def test_relabel_renames_file_dist_info_data_metadata_and_wheel(source_wheel: Path, tmp_path: Path) -> None:
    before = digest(source_wheel)
    provenance = provenance_n()
    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu128torch2.8", build_tag="3", build_info=provenance)

    assert result.filename == "demo_ext-0.1.0+cu128torch2.8-3-cp311-cp311-linux_x86_64.whl"
    assert result.path.parent == tmp_path / "out"
    assert result.sha256 == digest(result.path)
    assert result.size == result.path.stat().st_size
    assert digest(source_wheel) == before, "the input must never be modified"

    di = "demo_ext-0.1.0+cu128torch2.8.dist-info"
    names = members(result.path)
    assert f"{di}/_build_info.json" in names
    assert "demo_ext-0.1.0+cu128torch2.8.data/scripts/demo-run" in names
    assert not any(n.startswith("demo_ext-0.1.0.") for n in names)
    assert list(names)[-1] == f"{di}/RECORD", "RECORD closes the archive"
    with zipfile.ZipFile(result.path) as zf:
        metadata = zf.read(f"{di}/METADATA").decode()
        wheel_meta = zf.read(f"{di}/WHEEL").decode()
        assert zf.read(f"{di}/_build_info.json") == provenance.for_wheel().to_json()
    assert "Version: 0.1.0+cu128torch2.8\n" in metadata
    assert "Build: 3\n" in wheel_meta
    assert "Tag: cp311-cp311-linux_x86_64" in wheel_meta


def _provenance_keeping(hashes: dict[str, str]) -> Callable[[stamp.Relabel, Mapping[str, str]], buildinfo.BuildInfo]:
    """provenance_n(1), keeping in ``hashes`` the member hashes stamp_wheel hands a provenance
    (what postbuild's records for each extension)."""

    def info(_relabel: stamp.Relabel, new: Mapping[str, str]) -> buildinfo.BuildInfo:
        hashes.update(new)
        return provenance_n(1)

    return info


def test_record_verifies_with_the_wheel_library(source_wheel: Path, tmp_path: Path) -> None:
    hashes: dict[str, str] = {}
    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu130", build_tag=None,
                         build_info=_provenance_keeping(hashes))
    assert result.filename == "demo_ext-0.1.0+cu130-cp311-cp311-linux_x86_64.whl"
    # WheelFile in read mode checks every member against RECORD as it is read.
    with WheelFile(result.path) as wf:
        for info in wf.infolist():
            wf.read(info)
        record = wf.read("demo_ext-0.1.0+cu130.dist-info/RECORD").decode().splitlines()
    listed = {line.split(",")[0] for line in record}
    assert listed == set(members(result.path))
    assert hashes["demo_ext/__init__.py"] == hashlib.sha256(b"VALUE = 1\n").hexdigest()


def test_data_scripts_exec_bits_and_symlinks_survive(source_wheel: Path, tmp_path: Path) -> None:
    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu128torch2.8", build_tag=None)
    names = members(result.path)
    script = names["demo_ext-0.1.0+cu128torch2.8.data/scripts/demo-run"]
    assert stat.S_IMODE(script.external_attr >> 16) == 0o755
    assert "demo_ext-0.1.0+cu128torch2.8.data/platlib/demo_ext_native.so" in names
    link = names[LINK]
    assert stat.S_ISLNK(link.external_attr >> 16)
    assert link.create_system == 3
    with zipfile.ZipFile(result.path) as zf:
        assert zf.read(link) == b"libdemo.so.1"
    assert stat.S_IMODE(names["demo_ext/__init__.py"].external_attr >> 16) == 0o644


def test_build_info_callable_gets_new_paths_and_hashes(source_wheel: Path, tmp_path: Path) -> None:
    seen: dict[str, str] = {}

    def make(relabel: stamp.Relabel, hashes: Mapping[str, str]) -> buildinfo.BuildInfo:
        seen.update(hashes)
        new = relabel.member(DATA_LIB)
        return dataclasses.replace(provenance_n(), extensions={new: hashes[new]})

    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag="1", build_info=make)
    new = "demo_ext-0.1.0+cu128.data/platlib/demo_ext_native.so"
    assert result.build_info is not None
    assert result.build_info.extensions == {new: hashlib.sha256(b"\x7fELF platlib\n").hexdigest()}
    assert set(seen) == set(members(result.path)) - {
        "demo_ext-0.1.0+cu128.dist-info/_build_info.json", "demo_ext-0.1.0+cu128.dist-info/RECORD"}


def test_failed_rename_leaves_input_intact_and_no_output(source_wheel: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    before = digest(source_wheel)
    out = tmp_path / "out"

    def broken_publish(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "link", broken_publish)  # the step that puts the wheel under its name
    with pytest.raises(OSError, match="No space left"):
        stamp_wheel(source_wheel, out, local="cu128", build_tag=None, build_info=provenance_n(1))
    assert digest(source_wheel) == before
    assert list(out.iterdir()) == [], "neither the wheel nor its temporary file may remain"


def test_filesystems_without_hard_links_still_publish_atomically(source_wheel: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(1, "Operation not permitted")  # what FAT and some network mounts answer

    monkeypatch.setattr(os, "link", no_links)
    first = stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None, build_info=provenance_n(1))
    assert first.created
    assert [p.name for p in (tmp_path / "out").iterdir()] == [first.path.name]
    again = stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None, build_info=provenance_n(1))
    assert not again.created
    assert again.sha256 == first.sha256
    with pytest.raises(UsageError, match="already exists with other content"):
        stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None, build_info=provenance_n(2))


def test_process_killed_between_temp_and_rename_leaves_no_partial_output(source_wheel: Path,
                                                                         tmp_path: Path) -> None:
    """A real crash: the process dies (no cleanup runs) right before the wheel gets its name."""
    before = digest(source_wheel)
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        from farm.provenance import stamp
        from tests.test_stamp import provenance_n
        stamp.os.link = lambda a, b: os._exit(9)  # dies as it would put the wheel under its name
        stamp.stamp_wheel(Path({str(source_wheel)!r}), Path({str(out)!r}), local="cu128", build_tag=None,
                          build_info=provenance_n(1))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 9, proc.stderr
    assert digest(source_wheel) == before
    left = [p.name for p in out.iterdir()]
    assert not any(n.endswith(".whl") for n in left), left  # nothing under a wheel name
    assert all(n.startswith(".") and n.endswith(".part") for n in left), left
    # A later run succeeds beside the leftover.
    assert stamp_wheel(source_wheel, out, local="cu128", build_tag=None).path.exists()


def test_input_that_does_not_match_its_record_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", {"demo_ext/a.py": b"a = 1\n"})
    tampered = tmp_path / "in2" / wheel.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(tampered, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, b"a = 2\n" if info.filename == "demo_ext/a.py" else data)
    with pytest.raises(WheelError, match="does not match the wheel's own RECORD"):
        stamp_wheel(tampered, tmp_path / "out", local="cu128", build_tag=None)
    assert list((tmp_path / "out").iterdir()) == []


def test_already_stamped_wheel_is_refused(source_wheel: Path, tmp_path: Path) -> None:
    first = stamp_wheel(source_wheel, tmp_path / "one", local="cu128", build_tag=None, build_info=provenance_n(1))
    with pytest.raises(WheelError, match="already stamped"):
        stamp_wheel(first.path, tmp_path / "two", local="cu128", build_tag=None, build_info=provenance_n(1))


def test_output_over_input_is_refused(source_wheel: Path) -> None:
    first = stamp_wheel(source_wheel, source_wheel.parent, local="cu128", build_tag=None)
    before = digest(first.path)
    with pytest.raises(UsageError, match="overwrite the input"):
        stamp_wheel(first.path, first.path.parent, local="cu128", build_tag=None)
    assert digest(first.path) == before


def test_unsafe_member_names_are_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", {"../evil.py": b"x"})
    with pytest.raises(WheelError, match=r"'\.\.'"):
        stamp_wheel(wheel, tmp_path / "out", local="cu128", build_tag=None)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_member_that_collides_with_a_relabelled_one_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", {
        "demo_ext-0.1.0.data/scripts/run": b"#!/bin/sh\n",
        "demo_ext-0.1.0+cu128.data/scripts/run": b"#!/bin/sh\necho other\n",
    })
    with pytest.raises(WheelError, match=r"would become demo_ext-0\.1\.0\+cu128\.data/scripts/run, which the "
                                          r"wheel already holds"):
        stamp_wheel(wheel, tmp_path / "out", local="cu128", build_tag=None)
    assert not any((tmp_path / "out").iterdir())


def test_existing_build_tag_and_local_label_are_replaced(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0+local", {"demo_ext/a.py": b""}, build="7")
    result = stamp_wheel(wheel, tmp_path / "out", local="cu126torch2.7", build_tag=None)
    assert result.filename == "demo_ext-0.1.0+cu126torch2.7-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(result.path) as zf:
        assert "Build:" not in zf.read("demo_ext-0.1.0+cu126torch2.7.dist-info/WHEEL").decode()


def test_plan_relabel_validates_labels() -> None:
    names = ["demo_ext-1.0.dist-info/METADATA"]
    with pytest.raises(UsageError):
        plan_relabel("demo_ext-1.0-py3-none-any.whl", names, local="cu128 torch", build_tag=None)
    with pytest.raises(UsageError):
        plan_relabel("demo_ext-1.0-py3-none-any.whl", names, local="cu128", build_tag="x1")
    with pytest.raises(WheelError, match="one demo_ext-\\*.dist-info"):
        plan_relabel("demo_ext-1.0-py3-none-any.whl", ["other-1.0.dist-info/METADATA"], local="cu128",
                     build_tag=None)


def test_wheel_name_parse() -> None:
    name = WheelName.parse("flash_attn-2.8.3+cu128torch2.8-2-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert (name.dist, name.public_version, name.local, name.build) == ("flash_attn", "2.8.3", "cu128torch2.8", "2")
    assert name.filename == "flash_attn-2.8.3+cu128torch2.8-2-cp311-cp311-manylinux_2_28_x86_64.whl"
    for bad in ("x.zip", "a-1.0-py3.whl", "a-1.0-x1-py3-none-any.whl", "a-notaversion!-py3-none-any.whl"):
        with pytest.raises(WheelError):
            WheelName.parse(bad)


def test_metadata_edit_touches_only_the_header() -> None:
    text = "Metadata-Version: 2.1\r\nName: x\r\nVersion: 1.0\r\n\r\nVersion: 1.0 in the body stays\r\n"
    out = set_metadata_version(text, "1.0+cu128", where="x")
    assert out == "Metadata-Version: 2.1\r\nName: x\r\nVersion: 1.0+cu128\r\n\r\nVersion: 1.0 in the body stays\r\n"
    with pytest.raises(WheelError, match="no Version"):
        set_metadata_version("Name: x\n\nVersion: 1\n", "2", where="x")


def test_metadata_edit_adds_the_recipes_requirements_once() -> None:
    text = "Metadata-Version: 2.1\nName: x\nVersion: 1.0\nRequires-Dist: NumPy>=1\n\nbody\n"
    out = set_metadata_version(text, "1.0+cu128", where="x", requires=("numpy", "ninja>=1.11"))
    assert out == ("Metadata-Version: 2.1\nName: x\nVersion: 1.0+cu128\nRequires-Dist: NumPy>=1\n"
                   "Requires-Dist: ninja>=1.11\n\nbody\n")
    no_body = set_metadata_version("Name: x\nVersion: 1.0\n", "1.0+cu128", where="x", requires=("ninja",))
    assert no_body == "Name: x\nVersion: 1.0+cu128\nRequires-Dist: ninja\n"
    with pytest.raises(WheelError, match="is not a requirement"):
        set_metadata_version("Name: x\nVersion: 1.0\nRequires-Dist: >=>\n", "2", where="x", requires=("a",))


def test_stamped_wheel_carries_the_requirements(source_wheel: Path, tmp_path: Path) -> None:
    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None, requires=("ninja",))
    with zipfile.ZipFile(result.path) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: ninja" in metadata
    with WheelFile(result.path) as wf:  # RECORD still verifies
        for name in wf.namelist():
            wf.read(name)


def test_wheel_build_edit() -> None:
    text = "Wheel-Version: 1.0\nBuild: 1\nTag: py3-none-any\n"
    assert set_wheel_build(text, None) == "Wheel-Version: 1.0\nTag: py3-none-any\n"
    assert set_wheel_build(text, "4") == "Wheel-Version: 1.0\nBuild: 4\nTag: py3-none-any\n"
    # Without a Tag line the header still goes among the headers, not after the blank line.
    assert set_wheel_build("Wheel-Version: 1.0\nGenerator: x\n", "2") == "Wheel-Version: 1.0\nGenerator: x\nBuild: 2\n"


def test_stamping_again_is_a_no_op_and_other_bytes_are_refused(source_wheel: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = stamp_wheel(source_wheel, out, local="cu128", build_tag="1", build_info=provenance_n(1))
    again = stamp_wheel(source_wheel, out, local="cu128", build_tag="1", build_info=provenance_n(1))
    assert first.created
    assert not again.created
    assert again.sha256 == first.sha256 == digest(first.path)
    with pytest.raises(UsageError, match="already exists with other content"):
        stamp_wheel(source_wheel, out, local="cu128", build_tag="1", build_info=provenance_n(2))
    assert digest(first.path) == first.sha256
    assert sorted(p.name for p in out.iterdir()) == [first.filename]  # no temp file left


def _set_header_bits(wheel: Path, local_at: int, central_at: int, value: int, *, field: str) -> None:
    """Patch every local and central header of ``wheel``: OR a flag bit in, or set the method."""
    data = bytearray(wheel.read_bytes())
    for magic, offset in ((b"PK\x03\x04", local_at), (b"PK\x01\x02", central_at)):
        at = data.find(magic)
        while at >= 0:
            old = int.from_bytes(data[at + offset:at + offset + 2], "little")
            new = old | value if field == "flags" else value
            data[at + offset:at + offset + 2] = new.to_bytes(2, "little")
            at = data.find(magic, at + 4)
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize(("field", "local_at", "central_at", "value", "message"), [
    ("flags", 6, 8, 0x1, "encrypted"),
    ("method", 8, 10, 9, "compression method 9"),  # deflate64: zipfile cannot read it
])
def test_encrypted_or_unreadable_compression_is_refused(source_wheel: Path, tmp_path: Path, field: str,
                                                        local_at: int, central_at: int, value: int,
                                                        message: str) -> None:
    _set_header_bits(source_wheel, local_at, central_at, value, field=field)
    with pytest.raises(WheelError, match=message):
        stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_stamped_file_is_world_readable(source_wheel: Path, tmp_path: Path) -> None:
    result = stamp_wheel(source_wheel, tmp_path / "out", local="cu128", build_tag=None)
    assert stat.S_IMODE(result.path.stat().st_mode) == 0o644


def _compressed_bytes(path: Path, name: str) -> bytes:
    """A member's bytes as stored (after its local header), read without inflating them."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    data = path.read_bytes()
    at = info.header_offset
    name_len = int.from_bytes(data[at + 26:at + 28], "little")
    extra_len = int.from_bytes(data[at + 28:at + 30], "little")
    start = at + 30 + name_len + extra_len
    return data[start:start + info.compress_size]


def test_unchanged_members_are_copied_as_stored_and_the_wheel_still_installs(tmp_path: Path) -> None:
    """Only dist-info is rewritten: every other member keeps its compressed bytes as they were, and
    the result still passes RECORD verification, `wheel unpack` and a real pip install."""
    payload = os.urandom(1 << 16) + b"\0" * (1 << 16)  # half incompressible, half not
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", {
        "demo_ext/__init__.py": b"VALUE = 1\n",
        "demo_ext/blob.bin": payload,
        "demo_ext-0.1.0.data/scripts/demo-run": b"#!/bin/sh\necho demo\n",
    }, executables=("demo_ext-0.1.0.data/scripts/demo-run",), tag=f"{PY}-{PY}-linux_x86_64")  # pip installs it here
    hashes: dict[str, str] = {}
    result = stamp_wheel(wheel, tmp_path / "out", local="cu130", build_tag="1", build_info=_provenance_keeping(hashes))
    for old, new in (("demo_ext/blob.bin", "demo_ext/blob.bin"), ("demo_ext/__init__.py", "demo_ext/__init__.py"),
                     ("demo_ext-0.1.0.data/scripts/demo-run", "demo_ext-0.1.0+cu130.data/scripts/demo-run")):
        assert _compressed_bytes(result.path, new) == _compressed_bytes(wheel, old)
    assert hashes["demo_ext/blob.bin"] == hashlib.sha256(payload).hexdigest()
    with WheelFile(result.path) as wf:  # checks every member against RECORD as it reads it
        for info in wf.infolist():
            wf.read(info)
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "unpacked"), str(result.path)],
                   check=True, capture_output=True)
    assert (tmp_path / "unpacked" / "demo_ext-0.1.0+cu130" / "demo_ext" / "blob.bin").read_bytes() == payload
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target),
                    str(result.path)], check=True, capture_output=True)
    assert (target / "demo_ext" / "blob.bin").read_bytes() == payload
    assert (target / "demo_ext-0.1.0+cu130.dist-info" / "_build_info.json").is_file()


def test_corrupt_compressed_bytes_are_refused(tmp_path: Path) -> None:
    """The raw copy still inflates and checks what it copies: a flipped byte never gets new hashes."""
    wheel = make_wheel(tmp_path / "in", "demo_ext", "0.1.0", {"demo_ext/blob.bin": os.urandom(1 << 15)})
    stored = _compressed_bytes(wheel, "demo_ext/blob.bin")
    data = bytearray(wheel.read_bytes())
    at = data.find(stored) + len(stored) // 2
    data[at] ^= 0xFF
    wheel.write_bytes(bytes(data))
    with pytest.raises(WheelError, match="corrupt|does not match"):
        stamp_wheel(wheel, tmp_path / "out", local="cu128", build_tag=None)
    assert not any((tmp_path / "out").iterdir())


def test_a_file_added_to_dist_info_leaves_every_other_byte(tmp_path: Path) -> None:
    """The wheel-variant channel's rewrite: members copied as they are, the new file and RECORD
    stored, the same bytes written to a file or to a stream that cannot seek; wheel's own reader
    checks every member against the new RECORD."""
    src = make_wheel(tmp_path, "demo_ext", "0.1.0+cu130", {"demo_ext/__init__.py": b"x = 1\n" * 50,
                                                             "demo_ext/_C.so": os.urandom(4096)})

    class Stream:  # what a network socket or a hashing sink offers: no seek
        def __init__(self) -> None:
            self.data = bytearray()

        def write(self, b: bytes) -> int:
            self.data += b
            return len(b)

        def tell(self) -> int:
            return len(self.data)

        def seek(self, *_: object) -> int:
            raise OSError("not seekable")

        def flush(self) -> None:
            pass

    out = tmp_path / "out" / src.name
    out.parent.mkdir()
    with out.open("wb") as fh:
        stamp.add_to_dist_info(src, fh, "variant.json", b'{"a": 1}\n')
    stream = Stream()
    stamp.add_to_dist_info(src, stream, "variant.json", b'{"a": 1}\n')  # type: ignore[arg-type]
    assert bytes(stream.data) == out.read_bytes()
    with WheelFile(out) as wf:  # verifies each member's hash against RECORD as it reads
        for name in wf.namelist():
            wf.read(name)
        assert wf.read("demo_ext-0.1.0+cu130.dist-info/variant.json") == b'{"a": 1}\n'
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        for info in a.infolist():
            if not info.filename.endswith("RECORD"):
                assert b.getinfo(info.filename).compress_size == info.compress_size
    with pytest.raises(WheelError, match="variant.json is there already"), (tmp_path / "again.whl").open("wb") as fh:
        stamp.add_to_dist_info(out, fh, "variant.json", b"{}")
