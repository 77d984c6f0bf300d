"""What differs between two wheels (:mod:`farm.binary.wheeldiff`): members, the ELF sections of a
shared object (real ones, made by gcc), JSON keys, text lines, and the zip's own fields."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

from farm.binary.wheeldiff import MAX_DETAILS, compare_wheels, elf_differences

DIST = "demo-1.0.dist-info"


def _so(tmp_path: Path, name: str, value: int) -> bytes:
    src = tmp_path / f"{name}.c"
    src.write_text(f'int answer(void) {{ return {value}; }}\nconst char* tag = "{name}";\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", str(src), "-o", str(tmp_path / f"{name}.so")], check=True)
    return (tmp_path / f"{name}.so").read_bytes()


def _wheel(path: Path, members: dict[str, bytes], *,
           date: tuple[int, int, int, int, int, int] = (1980, 1, 1, 0, 0, 0)) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=date)
            info.external_attr = 0o100644 << 16
            zf.writestr(info, data)
    return path


def test_a_wheel_is_identical_to_its_copy(tmp_path) -> None:
    a = _wheel(tmp_path / "a.whl", {f"{DIST}/METADATA": b"Name: demo\n"})
    shutil.copy(a, tmp_path / "b.whl")
    diff = compare_wheels(a, tmp_path / "b.whl")
    assert diff.identical
    assert diff.members == ()
    assert diff.render()[0].startswith("identical: sha256 ")


def test_members_sections_keys_and_lines_that_differ_are_named(tmp_path) -> None:
    so_a, so_b = _so(tmp_path, "one", 1), _so(tmp_path, "two", 2)
    info_a = {"cell": {"cuda": "13.0"}, "toolchain": {"nvcc": "13.0.88", "python": "3.11.7"}, "run": {"id": 1}}
    info_b = {"cell": {"cuda": "13.0"}, "toolchain": {"nvcc": "13.0.96", "python": "3.11.7"}}
    a = _wheel(tmp_path / "a.whl", {"demo/_C.so": so_a, f"{DIST}/_build_info.json": json.dumps(info_a).encode(),
                                    f"{DIST}/METADATA": b"Name: demo\nVersion: 1.0\n", "demo/old.py": b""})
    b = _wheel(tmp_path / "b.whl", {"demo/_C.so": so_b, f"{DIST}/_build_info.json": json.dumps(info_b).encode(),
                                    f"{DIST}/METADATA": b"Name: demo\nVersion: 1.1\n", "demo/new.py": b""})
    diff = compare_wheels(a, b)
    assert not diff.identical
    found = {m.name: m for m in diff.members}
    assert (found["demo/old.py"].what, found["demo/new.py"].what) == ("only in A", "only in B")
    sections = found["demo/_C.so"].details
    assert any(d.startswith("section .text: ") and "first difference at +0x" in d for d in sections)
    assert any(d.startswith("section .rodata: ") for d in sections)  # "one" -> "two"
    assert not any(".shstrtab" in d for d in sections)
    assert found[f"{DIST}/_build_info.json"].details == ('toolchain.nvcc: "13.0.88" -> "13.0.96"', "run: only in A")
    assert found[f"{DIST}/METADATA"].details == ("- Version: 1.0", "+ Version: 1.1")
    assert json.loads(json.dumps(diff.to_json()))["differences"][0]["member"] == "demo/old.py"


def test_a_string_table_that_differs_names_the_strings_only_one_side_holds(tmp_path) -> None:
    """The same source compiled with debug information in two folders: the folder each records is
    what a reader of the difference needs (a path the build did not map)."""
    objects = []
    for folder in ("first-build", "second-build"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "k.c").write_text("int answer(void) { return 1; }\n")
        subprocess.run(["gcc", "-g", "-shared", "-fPIC", "k.c", "-o", "k.so"], cwd=tmp_path / folder, check=True)
        objects.append(tmp_path / folder / "k.so")
    found = [d for d in elf_differences(*objects) or [] if d.startswith("section .debug_")]
    assert any(f"only in A: '{tmp_path / 'first-build'}'" in d and f"only in B: '{tmp_path / 'second-build'}'" in d
               for d in found), found


def test_every_member_the_same_names_the_zips_own_fields(tmp_path) -> None:
    members = {f"{DIST}/METADATA": b"Name: demo\n", f"{DIST}/RECORD": b""}
    a = _wheel(tmp_path / "a.whl", members)
    b = _wheel(tmp_path / "b.whl", members, date=(2026, 12, 6, 17, 0, 0))
    first = compare_wheels(a, b).members[0]
    assert (first.what, first.details) == ("zip entry", ("timestamp: (1980, 1, 1, 0, 0, 0) -> (2026, 12, 6, 17, 0, 0)",))
    c = _wheel(tmp_path / "c.whl", dict(reversed(members.items())))
    assert [m.what for m in compare_wheels(a, c).members] == ["member order"]


def test_details_are_bounded_and_a_non_elf_compares_by_bytes(tmp_path) -> None:
    many_a = "".join(f"line {i}\n" for i in range(100)).encode()
    many_b = "".join(f"row {i}\n" for i in range(100)).encode()
    a = _wheel(tmp_path / "a.whl", {f"{DIST}/RECORD": many_a, "demo/blob.bin": b"\0" * 10})
    b = _wheel(tmp_path / "b.whl", {f"{DIST}/RECORD": many_b, "demo/blob.bin": b"\0" * 5 + b"\1" * 6})
    found = {m.name: m.details for m in compare_wheels(a, b).members}
    assert len(found[f"{DIST}/RECORD"]) == MAX_DETAILS + 1
    assert found[f"{DIST}/RECORD"][-1] == f"... and {200 - MAX_DETAILS} more"
    assert found["demo/blob.bin"] == ("10 -> 11 bytes, first difference at 0x5",)
    (tmp_path / "x").write_bytes(b"not an ELF")
    assert elf_differences(tmp_path / "x", tmp_path / "x") is None
