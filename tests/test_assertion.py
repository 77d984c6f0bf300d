"""The post-build assertion on wheels packed from real nvcc builds: it passes the right one and fails
each wrong one naming the probable cause."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from farm.binary.archrule import Expected, VendoredRule
from farm.binary.assertion import Cause, assert_inspection, assert_wheel, judge
from farm.binary.inspection import Reader, compare, inspect_file
from farm.cli import main
from farm.errors import BinaryFormatError, ToolError
from farm.model.arch import ArchList
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.postbuildfix import builder_wheel, write_farm_root
from tests.support.wheelmaker import make_wheel

EXT = "demo/_C.cpython-311-x86_64-linux-gnu.so"
SM90 = "demo/_qattn_sm90.cpython-311-x86_64-linux-gnu.so"
EXPECTED = Expected(ArchList.parse(BASE))


def _wheel(tmp_path: Path, fx: CudaFixtures, **members: str) -> Path:
    """A wheel whose members (archive path -> fixture name) are the fixtures' .so files."""
    files: dict[str, bytes | Path] = {"demo/__init__.py": b""}
    files.update({arc: fx.path(name) for arc, name in members.items()})
    return make_wheel(tmp_path, "demo", "1.0", files)


def _single(tmp_path: Path, fx: CudaFixtures, fixture: str) -> Path:
    return _wheel(tmp_path, fx, **{EXT: fixture})


@pytest.mark.parametrize("fixture", ["two-tu", "default", "size", "nvcc-link"])
def test_correct_wheels_pass(cuda_fixtures: CudaFixtures, tmp_path: Path, fixture: str) -> None:
    report = assert_wheel(_single(tmp_path, cuda_fixtures, fixture), EXPECTED)
    assert report.passed, report.render()
    (ext,) = report.extensions
    assert ext.found == ext.expected
    assert not ext.missing
    assert not ext.extra
    assert report.tools.native
    assert report.tools.cuobjdump
    assert report.to_json()["result"] == "passed"


@pytest.mark.parametrize(
    ("fixture", "code", "cause", "targets"),
    [
        ("nvcc-link-default", "extra", Cause.DEVICE_LINK_STUB, "sm_75"),
        ("nvcc-default", "extra", Cause.NVCC_DEFAULT, "sm_75;compute_75"),
        ("nvcc-default", "missing", Cause.NVCC_DEFAULT, BASE),
        ("ptx-only", "missing", Cause.BUILD_OVERRIDE, BASE),
        ("ptx-only", "extra", Cause.BUILD_OVERRIDE, "compute_80"),
        ("tu-mismatch", "incomplete-tu", Cause.TU_FLAGS, "9.0+PTX"),
        ("rdc", "missing", Cause.RDC_LINK, "compute_90"),
        ("host-only", "no-device-code", Cause.NO_CUDA, BASE),
        ("sm90a", "missing", Cause.BUILD_OVERRIDE, BASE),
    ],
)
def test_wrong_wheels_fail_naming_the_cause(cuda_fixtures: CudaFixtures, tmp_path: Path, fixture: str, code: str,
                                            cause: Cause, targets: str) -> None:
    report = assert_wheel(_single(tmp_path, cuda_fixtures, fixture), EXPECTED)
    assert not report.passed
    (ext,) = report.extensions
    findings = [f for f in ext.findings if f.code == code]
    assert [(f.cause, ArchList.of(f.targets)) for f in findings] == [(cause, ArchList.parse(targets))], report.render()
    text = report.render()
    assert cause.value in text
    assert EXT in text
    assert "FAILED" in text
    data: dict[str, Any] = report.to_json()
    assert data["passed"] is False
    assert cause.value in data["extensions"][0]["likely_causes"]


def test_report_table_has_expected_found_missing_extra(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    report = assert_wheel(_single(tmp_path, cuda_fixtures, "nvcc-default"), EXPECTED)
    text = report.render()
    for row in ("expected  sm_80;sm_90;compute_90", "found     sm_75;compute_75",
                "missing   sm_80;sm_90;compute_90", "extra     sm_75;compute_75"):
        assert row in text, text
    data: dict[str, Any] = report.to_json()
    ext = data["extensions"][0]
    assert (ext["expected"], ext["found"], ext["missing"], ext["extra"]) == (
        "sm_80;sm_90;compute_90", "sm_75;compute_75", "sm_80;sm_90;compute_90", "sm_75;compute_75")


def test_family_variant_is_compared_exactly(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """The native reader sees the f cuobjdump drops: 10.0 is not 10.0f."""
    wheel = _single(tmp_path, cuda_fixtures, "family")
    assert assert_wheel(wheel, Expected(ArchList.parse("10.0f;12.0f+PTX"))).passed
    report = assert_wheel(wheel, Expected(ArchList.parse("10.0;12.0f+PTX")))
    (ext,) = report.extensions
    assert (ext.missing.canonical(), ext.extra.canonical()) == ("sm_100", "sm_100f")


def test_per_extension_lists_are_globs(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, cuda_fixtures, **{EXT: "two-tu", SM90: "sm90a"})
    per = Expected(ArchList.parse(BASE), per_extension=(("*_qattn_sm90*.so", ArchList.parse("9.0a+PTX")),))
    report = assert_wheel(wheel, per)
    assert report.passed, report.render()
    assert [e.expected_from for e in report.extensions] == [None, "*_qattn_sm90*.so"]
    # the archive path matches too, and the first matching glob wins
    by_path = Expected(ArchList.parse(BASE), per_extension=(("demo/_qattn_*", ArchList.parse("9.0a+PTX")),
                                                            ("*.so", ArchList.parse("7.5"))))
    assert assert_wheel(wheel, by_path).extensions[1].expected_from == "demo/_qattn_*"
    # without the map, the per-arch module fails against the cell's list
    assert not assert_wheel(wheel, EXPECTED).passed


def test_recipe_override_cause(cuda_fixtures: CudaFixtures) -> None:
    """The extension's own list comes from the recipe and the build holds a subset of it."""
    insp = inspect_file(cuda_fixtures.path("sm90a"), Reader.NATIVE)
    result = judge(insp, ArchList.parse("9.0a+PTX;10.0a"), expected_from="*_sm90*.so")
    assert [(f.code, f.cause) for f in result.findings] == [("missing", Cause.RECIPE_OVERRIDE)]


def test_host_only_extensions(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, cuda_fixtures, **{EXT: "two-tu", "demo/_host.abi3.so": "host-only"})
    assert not assert_wheel(wheel, EXPECTED).passed
    declared = Expected(ArchList.parse(BASE), per_extension=(("_host.*", ArchList(frozenset())),))
    assert assert_wheel(wheel, declared).passed
    only_host = _single(tmp_path / "h", cuda_fixtures, "host-only")
    assert assert_wheel(only_host, Expected(ArchList.parse(BASE), cuda_package=False)).passed


def test_bundled_libraries_are_asserted_against_the_recipe(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    """A library auditwheel bundled into ``*.libs/`` is a binary users run like the extension: it
    must be declared, and hold its declared list (or be exempt, with a reason)."""

    lib = "demo.libs/libextra-12ab.so.1"
    wheel = _wheel(tmp_path, cuda_fixtures, **{EXT: "two-tu", lib: "sm90a"})  # built for other arches
    undeclared = assert_wheel(wheel, EXPECTED)
    assert not undeclared.passed
    assert "the recipe does not declare it" in undeclared.render()
    other = assert_wheel(wheel, replace(EXPECTED, vendored=(VendoredRule("libextra*", ArchList.parse(BASE)),)))
    assert not other.passed
    (result,) = other.vendored_results
    assert result.problem is not None
    assert "missing" in result.problem
    assert "extra sm_90a;compute_90a" in result.problem
    own = assert_wheel(wheel, replace(EXPECTED, vendored=(VendoredRule("libextra*", ArchList.parse("9.0a+PTX")),)))
    assert own.passed
    assert own.vendored_results[0].record() == {
        "found": "sm_90a;compute_90a", "expected": "sm_90a;compute_90a", "exempt": None}
    exempt = assert_wheel(wheel, replace(EXPECTED, vendored=(VendoredRule(lib, None, "NVIDIA's build"),)))
    assert exempt.passed
    assert exempt.vendored_results[0].record()["exempt"] == "NVIDIA's build"
    assert json.loads(json.dumps(exempt.to_json()))["vendored"][0]["path"] == lib


def test_no_extension_at_all(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b""})
    report = assert_wheel(wheel, EXPECTED)
    assert not report.passed
    assert [f.cause for f in report.findings] == [Cause.NO_EXTENSIONS]
    assert "contains no extension module" in report.render()
    assert assert_wheel(wheel, Expected(ArchList.parse(BASE), allow_no_extensions=True)).passed


def test_readers_disagreeing_fail_the_assertion(cuda_fixtures: CudaFixtures) -> None:
    """A disagreement (here: one file's headers against another's listing) is a failure of its own."""
    native = inspect_file(cuda_fixtures.path("two-tu"), Reader.BOTH)
    other = inspect_file(cuda_fixtures.path("default"), Reader.BOTH)
    mixed = dataclasses.replace(native, listing=other.listing, disagreement=compare(native.fatbins, other.listing or ()))
    report = assert_inspection("demo.whl", (mixed,), EXPECTED)
    assert not report.passed
    assert [f.cause for f in report.extensions[0].findings] == [Cause.READERS]


def test_corrupt_and_missing_tool_are_errors_not_verdicts(cuda_fixtures: CudaFixtures, tmp_path: Path) -> None:
    with pytest.raises(BinaryFormatError):
        assert_wheel(_single(tmp_path, cuda_fixtures, "bad-payload"), EXPECTED)
    with pytest.raises(ToolError):
        assert_wheel(_single(tmp_path / "t", cuda_fixtures, "default"), EXPECTED, cuobjdump=tmp_path / "absent")


def test_assert_command(cuda_fixtures: CudaFixtures, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _single(tmp_path / "good", cuda_fixtures, "two-tu")
    bad = _single(tmp_path / "bad", cuda_fixtures, "nvcc-link-default")
    assert main(["assert", str(good), "--arch-list", "8.0 9.0+PTX"]) == 0
    assert "passed" in capsys.readouterr().out
    assert main(["assert", str(good), str(bad), "--arch-list", BASE, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [w["passed"] for w in out["wheels"]] == [True, False]
    assert out["wheels"][1]["extensions"][0]["extra"] == "sm_75"
    sage = _wheel(tmp_path / "sage", cuda_fixtures, **{EXT: "two-tu", SM90: "sm90a"})
    assert main(["assert", str(sage), "--arch-list", BASE, "--ext", "*_qattn_sm90*.so=9.0a+PTX"]) == 0
    capsys.readouterr()
    corrupt = _single(tmp_path / "corrupt", cuda_fixtures, "truncated")
    assert main(["assert", str(corrupt), "--arch-list", BASE]) == 2
    assert "truncated" in capsys.readouterr().err
    # several wheels: the corrupt one is an error, the others still get their verdicts
    assert main(["assert", str(good), str(corrupt), str(bad), "--arch-list", BASE, "--json"]) == 2
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [w["passed"] for w in out["wheels"]] == [True, False]
    assert not out["passed"]
    assert out["errors"][0]["wheel"] == str(corrupt)
    assert "truncated" in captured.err
    assert main(["assert", str(good), "--arch-list", BASE, "--cuobjdump", str(tmp_path / "absent")]) == 3
    assert main(["assert", str(cuda_fixtures.path("default")), "--arch-list", BASE]) == 2


def test_assert_command_cell_form(cuda_fixtures: CudaFixtures, cuda_home: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--cell`` resolves the expected list from the farm configuration, as postbuild does."""
    wheel = builder_wheel(tmp_path / "w", "demo_ext", cuda_fixtures.path("two-tu"))
    root = write_farm_root(tmp_path / "farm", {"demo_ext": BASE})
    argv = ["assert", str(wheel), "--cell", "--root", str(root), "--cuda-home", str(cuda_home), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["wheels"][0]["expected"]["default"] == "sm_80;sm_90;compute_90"
    write_farm_root(root, {"demo_ext": "8.0;8.6;9.0+PTX"})  # the config now wants 8.6: the wheel lacks it
    assert main(argv) == 1
    assert json.loads(capsys.readouterr().out)["wheels"][0]["extensions"][0]["missing"] == "sm_86"
    assert main(["assert", str(wheel), "--cell", "--root", str(root), "--ext", "*.so=8.0"]) == 2
    assert "--ext goes with --arch-list" in capsys.readouterr().err
