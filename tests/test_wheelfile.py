"""Safe wheel reading: hostile archives are refused before anything is extracted."""

from __future__ import annotations

import stat
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from farm.binary.wheelfile import Limits, SafeWheel, is_shared_object, is_vendored
from farm.errors import WheelError
from tests.support.wheelmaker import make_wheel


def _zip(path: Path, entries: list[tuple[str, bytes]], *, links: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def _refused(path: Path, match: str, **kwargs: object) -> WheelError:
    with pytest.raises(WheelError, match=match) as err, SafeWheel(path, **kwargs):  # type: ignore[arg-type]
        pass
    assert str(path) in str(err.value)
    assert err.value.exit_code == 2
    return err.value


def test_members_vendored_apart_and_read(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {
        "demo/__init__.py": b"",
        "demo/_C.cpython-311-x86_64-linux-gnu.so": b"\x7fELF-ext",
        "demo/sub/_ops.abi3.so": b"\x7fELF-ops",
        "demo.libs/libgomp-a34b3233.so.1.0.0": b"\x7fELF-gomp",
    })
    with SafeWheel(wheel) as w:
        assert sorted(w.extension_members()) == ["demo/_C.cpython-311-x86_64-linux-gnu.so", "demo/sub/_ops.abi3.so"]
        assert w.vendored_members() == ["demo.libs/libgomp-a34b3233.so.1.0.0"]
        assert w.read("demo/sub/_ops.abi3.so") == b"\x7fELF-ops"
        assert w.dist_info() == "demo-1.0.dist-info"
        with w.extracted("demo/_C.cpython-311-x86_64-linux-gnu.so") as tmp:
            assert tmp.read_bytes() == b"\x7fELF-ext"
            assert tmp.name == "_C.cpython-311-x86_64-linux-gnu.so"
        assert not tmp.exists()
        out = w.extract("demo/sub/_ops.abi3.so", tmp_path / "ops.so")
        assert out.read_bytes() == b"\x7fELF-ops"
        with pytest.raises(WheelError, match="no entry"):
            w.read("demo/absent.so")


def test_name_helpers() -> None:
    assert is_shared_object("a/b.so")
    assert is_shared_object("a/b.pyd")
    assert is_shared_object("x.libs/libz.so.1")
    assert not is_shared_object("a/b.py")
    assert not is_shared_object("a/so.txt")
    assert is_vendored("demo.libs/libz.so.1")
    assert is_vendored("pkg/nested.libs/libz.so")
    assert not is_vendored("demo/libs/libz.so")


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("../evil.so", "'..' component"),
        ("demo/../../evil.so", "'..' component"),
        ("/etc/evil.so", "absolute path"),
        ("C:/evil.so", "absolute path"),
        ("demo\\evil.so", "not a clean relative path"),
    ],
)
def test_hostile_names_are_refused(tmp_path: Path, name: str, match: str) -> None:
    path = _zip(tmp_path / "bad.whl", [("demo/__init__.py", b""), (name, b"x")])
    _refused(path, match)


def test_links_inside_are_fine_and_outside_refused(tmp_path: Path) -> None:
    ok = _zip(tmp_path / "ok.whl", [("demo/libx.so.1", b"\x7fELF")], links={"demo/libx.so": "libx.so.1"})
    with SafeWheel(ok) as w:
        assert w.is_symlink("demo/libx.so")
        assert w.extension_members() == ["demo/libx.so.1"]  # links are not inspected twice
    for target in ("../../etc/passwd", "/etc/passwd", "../.."):
        bad = _zip(tmp_path / "bad.whl", [("demo/a.py", b"")], links={"demo/link": target})
        _refused(bad, "points outside the wheel")


def test_duplicate_entries_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("demo/a.so", b"one")
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("demo/a.so", b"two")
    _refused(path, "duplicate entry")


def test_decompression_bombs_are_refused(tmp_path: Path) -> None:
    path = _zip(tmp_path / "bomb.whl", [("demo/zeros.so", bytes(4 << 20))])
    _refused(path, "ratio above 100", limits=Limits(ratio_floor=1 << 20, max_ratio=100))
    _refused(path, "claims 4194304 bytes", limits=Limits(max_member=1 << 20))
    two = _zip(tmp_path / "two.whl", [("a.so", bytes(3 << 20)), ("b.so", bytes(3 << 20))])
    _refused(two, "in total", limits=Limits(max_total=5 << 20))
    with SafeWheel(two):  # the default limits let ordinary wheels through
        pass


def _central_records(data: bytes) -> list[int]:
    out, at = [], data.find(b"PK\x01\x02")
    while at != -1:
        out.append(at)
        at = data.find(b"PK\x01\x02", at + 4)
    return out


def test_overlapping_entries_are_refused(tmp_path: Path) -> None:
    """The overlapping-file zip bomb: two central records pointing at one local entry."""
    path = _zip(tmp_path / "overlap.whl", [("a.so", b"A" * 1000), ("b.so", b"B" * 1000)])
    data = bytearray(path.read_bytes())
    _, second = _central_records(bytes(data))
    struct.pack_into("<I", data, second + 42, 0)  # b.so's local header offset -> a.so's
    path.write_bytes(bytes(data))
    _refused(path, "no local header|overlaps")


def test_lying_sizes_and_corrupt_data_are_refused_on_read(tmp_path: Path) -> None:
    path = _zip(tmp_path / "lie.whl", [("demo/a.so", b"\x7fELF" + bytes(range(256)) * 64)])
    data = bytearray(path.read_bytes())
    (central,) = _central_records(bytes(data))
    struct.pack_into("<I", data, central + 24, 100)  # declared uncompressed size: 100 bytes
    path.write_bytes(bytes(data))
    with SafeWheel(path) as w, pytest.raises(WheelError, match="corrupt|declared size"):
        w.read("demo/a.so")


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "text.whl"
    path.write_text("hello")
    _refused(path, "not a readable zip")
    with pytest.raises(WheelError, match="no such file"), SafeWheel(tmp_path / "absent.whl"):
        pass


def test_refusal_extracts_nothing(tmp_path: Path) -> None:
    before = set(tmp_path.iterdir())
    path = _zip(tmp_path / "bad.whl", [("demo/ok.so", b"x"), ("../evil.so", b"x")])
    _refused(path, "'..'")
    assert set(tmp_path.iterdir()) == before | {path}
    assert not (tmp_path.parent / "evil.so").exists()


def _encrypted(data: bytearray, local: int, central: int) -> None:
    data[local + 6] |= 1  # general purpose flag bit 0, in both headers
    data[central + 8] |= 1


def _method_99(data: bytearray, local: int, central: int) -> None:
    struct.pack_into("<H", data, local + 8, 99)  # compression method (99: AES, which zipfile cannot read)
    struct.pack_into("<H", data, central + 10, 99)


@pytest.mark.parametrize(("edit", "match"), [(_encrypted, "is encrypted"), (_method_99, "compression method 99")])
def test_unreadable_entries_are_refused_up_front(
    tmp_path: Path, edit: Callable[[bytearray, int, int], None], match: str
) -> None:
    """Encrypted or exotically compressed entries would make zipfile raise mid-read: refused on open."""
    path = _zip(tmp_path / "odd.whl", [("demo/_C.so", b"\x7fELF" + bytes(100))])
    data = bytearray(path.read_bytes())
    (central,) = _central_records(bytes(data))
    edit(data, data.find(b"PK\x03\x04"), central)
    path.write_bytes(bytes(data))
    _refused(path, match)
