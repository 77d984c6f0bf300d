"""Both readers on every fixture: the same answer for valid files, a clear refusal for corrupt ones;
``farm inspect`` and ``farm explain PATH`` on files and wheels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.binary.archrule import Expected, VendoredRule
from farm.binary.assertion import assert_inspection
from farm.binary.cuobjdump import list_targets, variant_free
from farm.binary.fatbin import read_fatbins
from farm.binary.inspection import Reader, compare, inspect_file, inspect_wheel
from farm.cli import main
from farm.commands.inspect import _fatbin_lines
from farm.errors import BinaryFormatError, ToolError, WheelError
from farm.model.arch import ArchList
from farm.table import format_table
from tests.support.cudafix import BASE, CORRUPT, CORRUPT_HEADERS, FIXTURES, VALID, CudaFixtures
from tests.support.wheelmaker import make_wheel

EXT = "demo/_C.cpython-311-x86_64-linux-gnu.so"


@pytest.mark.parametrize("name", VALID)
def test_both_readers_agree_on_every_valid_fixture(cuda_fixtures: CudaFixtures, name: str) -> None:
    both = inspect_file(cuda_fixtures.path(name), Reader.BOTH)
    assert both.agrees, both.disagreement
    holds = FIXTURES[name].holds
    expected = ArchList.parse(holds) if holds else ArchList(frozenset())
    assert both.found == expected
    via_cuobjdump = inspect_file(cuda_fixtures.path(name), Reader.CUOBJDUMP)
    # cuobjdump cannot show the f of SASS; everything else is identical
    assert via_cuobjdump.found == ArchList.of(variant_free(t) for t in expected)


@pytest.mark.parametrize("name", CORRUPT)
@pytest.mark.parametrize("reader", [Reader.CUOBJDUMP, Reader.BOTH, Reader.NATIVE])
def test_corrupt_fixtures_fail_closed_in_every_mode(cuda_fixtures: CudaFixtures, name: str, reader: Reader) -> None:
    path = cuda_fixtures.path(name)
    if reader is Reader.NATIVE and name not in CORRUPT_HEADERS:
        # the header reader cannot see payload corruption (docs/background.md, "The fatbin
        # container"); that is why the
        # assertion also runs cuobjdump
        assert inspect_file(path, reader).found == ArchList.parse(BASE)
        return
    with pytest.raises(BinaryFormatError) as err:
        inspect_file(path, reader)
    assert str(path) in str(err.value)
    assert "fix:" in str(err.value)


def test_disagreement_is_described(cuda_fixtures: CudaFixtures) -> None:
    """Real listings of two different builds, compared: the difference is named both ways."""
    fatbins = read_fatbins(cuda_fixtures.path("nvcc-default"))
    listing = list_targets(cuda_fixtures.path("default"))
    text = compare(fatbins, listing)
    assert text is not None
    assert "sm_75" in text
    assert "compute_75" in text
    assert "sm_80" in text
    assert "compute_90" in text
    # per TU counts matter: one TU is not two
    assert compare(read_fatbins(cuda_fixtures.path("default")), list_targets(cuda_fixtures.path("two-tu")))


def test_wheel_with_extensions_and_vendored_libraries(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {
        EXT: cuda_fixtures.path("two-tu"),
        "demo/_qattn_sm90.cpython-311-x86_64-linux-gnu.so": cuda_fixtures.path("sm90a"),
        "demo.libs/libhost-1234.so.1": cuda_fixtures.path("host-only"),
    })
    result = inspect_wheel(wheel, Reader.BOTH)
    assert [e.path for e in result.extensions] == [EXT, "demo/_qattn_sm90.cpython-311-x86_64-linux-gnu.so"]
    assert [e.found.canonical() for e in result.extensions] == ["sm_80;sm_90;compute_90", "sm_90a;compute_90a"]
    assert [v.path for v in result.vendored] == ["demo.libs/libhost-1234.so.1"]
    assert not result.vendored[0].has_device_code
    assert result.agrees
    assert result.tools.native
    assert result.tools.cuobjdump


def test_corrupt_member_is_named_by_its_archive_path(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {EXT: cuda_fixtures.path("unknown-kind")})
    with pytest.raises(BinaryFormatError) as err:
        inspect_wheel(wheel)
    assert f"{wheel}!{EXT}" in str(err.value)
    assert "unknown entry kind 5" in str(err.value)
    assert "farm-wheel-" not in str(err.value)


def test_hostile_wheel_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {"../evil.so": b"x"})
    with pytest.raises(WheelError, match="'..' component"):
        inspect_wheel(wheel)


def test_missing_cuobjdump_is_an_environment_error(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    with pytest.raises(ToolError) as err:
        inspect_file(cuda_fixtures.path("default"), Reader.BOTH, cuobjdump=tmp_path / "cuobjdump")
    assert err.value.exit_code == 3


def test_unknown_reader() -> None:
    with pytest.raises(Exception, match="unknown reader"):
        Reader.parse("objdump")


# -- the commands -------------------------------------------------------------------------------
def test_inspect_command_json(cuda_fixtures: CudaFixtures, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {EXT: cuda_fixtures.path("nvcc-link-default")})
    so = cuda_fixtures.path("family")
    assert main(["inspect", "--reader", "both", "--stubs", "--json", str(wheel), str(so)]) == 0
    out = json.loads(capsys.readouterr().out)
    wheel_result, file_result = out["results"]
    (ext,) = wheel_result["extensions"]
    assert ext["found"] == "sm_75;sm_80;sm_90;compute_90"
    assert ext["readers_agree"]
    assert [f["device_link_stub"] for f in ext["fatbins"]] == [True, False, False]
    # without --stubs a listing does not read payloads: the stub is "not checked", never "not a stub"
    assert main(["inspect", "--json", str(wheel)]) == 0
    (ext,) = json.loads(capsys.readouterr().out)["results"][0]["extensions"]
    assert ext["found"] == "sm_75;sm_80;sm_90;compute_90"
    assert [f["device_link_stub"] for f in ext["fatbins"]] == [None, None, None]
    assert file_result["found_targets"] == ["sm_100f", "sm_120f", "compute_120f"]


def test_inspect_json_into_a_pipe_holds_what_the_indented_one_does(
    cuda_fixtures: CudaFixtures, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into a pipe the document is compact, on a terminal indented: the same document, for several
    files, a wheel and an error among them."""
    wheel = make_wheel(tmp_path, "demo", "1.0", {EXT: cuda_fixtures.path("nvcc-link-default")})
    argv = ["inspect", "--json", "--stubs", str(cuda_fixtures.path("rdc")), str(wheel),
            str(cuda_fixtures.path("bad-magic")), str(cuda_fixtures.path("family"))]
    assert main(argv) == 2
    compact = capsys.readouterr().out
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    assert main(argv) == 2
    indented = capsys.readouterr().out
    assert "\n  " in indented
    assert compact.count("\n") == 1
    assert json.loads(compact) == json.loads(indented)
    results = json.loads(compact)["results"]
    assert [r["kind"] for r in results] == ["file", "wheel", "error", "file"]
    assert {f["section"] for f in results[0]["fatbins"]} == {".nv_fatbin", "__nv_relfatbin"}


@pytest.mark.parametrize("name", ["rdc", "nvcc-link-default", "family", "default"])
def test_fatbin_table_is_laid_out_as_format_table(cuda_fixtures: CudaFixtures, name: str) -> None:
    """The listing's table writer (widths from the data, one %-format per row) against the generic one."""
    insp = inspect_file(cuda_fixtures.path(name), stubs=True)
    loaded = {f.offset for f in insp.runnable}
    rows = [(str(i), f.section, hex(f.offset),
             "stub" if f.offset in insp.stubs else "" if f.offset in loaded else "not loaded",
             " ".join(e.name + ("" if e.compressed.value == "none" else f"({e.compressed.value})") for e in f.entries))
            for i, f in enumerate(insp.fatbins, 1)]
    expected = format_table(("#", "section", "offset", "note", "entries"), rows, indent="    ")
    assert "\n".join(_fatbin_lines(insp, "    ")) == expected


def test_inspect_command_table_and_exit_codes(cuda_fixtures: CudaFixtures, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(cuda_fixtures.path("rdc"))]) == 0
    out = capsys.readouterr().out
    assert "__nv_relfatbin" in out
    assert "not loaded" in out
    assert "compute_90(zstd)" in out
    # a corrupt file among good ones: the good ones are still shown, exit 2
    code = main(["inspect", str(cuda_fixtures.path("bad-magic")), str(cuda_fixtures.path("default"))])
    captured = capsys.readouterr()
    assert code == 2
    assert "bad fatbin magic" in captured.err
    assert "sm_80;sm_90;compute_90" in captured.out
    assert main(["inspect", "--reader", "both", str(cuda_fixtures.path("host-only"))]) == 0
    assert "no device code" in capsys.readouterr().out
    # a cuobjdump named without a reader that runs it is a usage error, not a silent no-op
    assert main(["inspect", "--cuobjdump", "/bin/true", str(cuda_fixtures.path("default"))]) == 2
    assert "--reader both" in capsys.readouterr().err


def test_explain_path_uses_what_the_binary_holds(cuda_fixtures: CudaFixtures, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {EXT: cuda_fixtures.path("rdc")})
    assert main(["explain", str(wheel), "--device", "9.0", "--device", "8.9", "--json"]) == 0
    (ext,) = json.loads(capsys.readouterr().out)["extensions"]
    assert ext["found"] == "sm_80;sm_90"
    by_device = {d["device"]: d for d in ext["devices"]}
    assert by_device["9.0"]["image"] == "sm_90"
    assert by_device["8.9"]["image"] == "sm_80"  # the compute_90 PTX in __nv_relfatbin never loads
    assert main(["explain", str(cuda_fixtures.path("ptx-only")), "--device", "7.5", "--device", "8.6"]) == 0
    out = capsys.readouterr().out
    assert "cudaErrorNoKernelImageForDevice" in out
    assert "JIT-compiles compute_80" in out
    assert main(["explain", "8.0;9.0+PTX", "--device", "9.0"]) == 0  # the ARCH_LIST form still works
    assert "sm_90" in capsys.readouterr().out
    assert main(["explain", str(tmp_path / "absent.so")]) == 2


def test_explain_path_goes_by_translation_unit(cuda_fixtures: CudaFixtures, capsys: pytest.CaptureFixture[str]) -> None:
    """The runtime loads each TU's fatbin on its own: a device-link stub's empty sm_75 cubin runs
    nothing on a 7.5 GPU, and a TU holding only sm_80 has no image for a 9.0 GPU."""
    stub = cuda_fixtures.path("nvcc-link-default")
    assert main(["explain", str(stub), "--device", "7.5", "--device", "9.0", "--json"]) == 0
    (ext,) = json.loads(capsys.readouterr().out)["extensions"]
    assert ext["found"] == "sm_80;sm_90;compute_90"
    assert ext["notes"]
    assert [(d["device"], d["kind"], d["image"]) for d in ext["devices"]] == [
        ("7.5", "none", None), ("9.0", "sass", "sm_90")]
    mixed = cuda_fixtures.path("tu-mismatch")  # k1: 8.0;9.0+PTX, k2: 8.0
    assert main(["explain", str(mixed), "--device", "8.0", "--device", "9.0"]) == 0
    out = capsys.readouterr().out
    assert "translation units hold different images" in out
    row_90 = next(line for line in out.splitlines() if line.startswith("9.0"))
    assert "cudaErrorNoKernelImageForDevice" in row_90


def test_the_assertion_leaves_a_bundled_librarys_stubs_unread_and_judges_the_same(
    cuda_fixtures: CudaFixtures, tmp_path: Path
) -> None:
    """Stubs change the verdict on an extension, never on a bundled library (judged by its found
    set): the assertion does not decompress the library's cubins, and its verdicts are those it
    gives with them read, whatever the recipe expects."""
    lib = "demo.libs/libkern-1a2b3c4d.so.1"
    wheel = make_wheel(tmp_path, "demo", "1.0", {EXT: cuda_fixtures.path("nvcc-link-default"),
                                                 lib: cuda_fixtures.path("nvcc-link-default")})
    read = inspect_wheel(wheel, Reader.NATIVE)
    lean = inspect_wheel(wheel, Reader.NATIVE, vendored_stubs=False)
    assert read.vendored[0].stubs
    assert read.extensions[0].stubs
    assert lean.extensions == read.extensions
    assert not lean.vendored[0].stubs_checked
    assert lean.vendored[0].found == read.vendored[0].found
    outcomes = set()
    for archs in (BASE, BASE + ";7.5", "9.0"):
        for rule in (VendoredRule("*.so*", ArchList.parse(archs)), VendoredRule("*.so*", None, "NVIDIA's own"), None):
            expected = Expected(ArchList.parse(archs), vendored=(rule,) if rule else ())
            verdicts = [assert_inspection(str(wheel), w.extensions, expected, vendored=w.vendored).to_json()
                        for w in (read, lean)]
            assert verdicts[0] == verdicts[1]
            outcomes.add(verdicts[0]["passed"])
    assert outcomes == {True, False}
