"""Every verdict rule of the assertion, on small ELF binaries written in the test (tests/support/fatbinmaker.py).

The nvcc fixtures (tests/test_assertion.py) show the rules hold on real builds; these pin each
rule in the fast tier, so a change that stops one from firing (or makes it fire on a good
binary) fails here without a toolkit: missing, extra (a build's own list, nvcc's default, a
device-link stub), PTX, per translation unit, ``-rdc``, host-only, readers, no extension, the
per-extension map and bundled libraries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from farm.binary.archrule import Expected, VendoredRule
from farm.binary.assertion import Cause, assert_inspection, judge
from farm.binary.inspection import Reader, SoInspection, inspect_file, inspect_wheel
from farm.model.arch import ArchList
from tests.support.fatbinmaker import shared_object
from tests.support.wheelmaker import make_wheel

BASE = "sm_80;sm_90;compute_90"
UNIT = ["sm_80", "sm_90", "compute_90"]
EXT = "demo/_C.cpython-311-x86_64-linux-gnu.so"


def _inspect(tmp_path: Path, units: list[list[str]], **kw: Any) -> SoInspection:
    return inspect_file(shared_object(tmp_path / "x.so", units, **kw), Reader.NATIVE, label=EXT)


def _codes(result: object) -> list[tuple[str, Cause, str]]:
    findings = result.findings  # type: ignore[attr-defined]
    return sorted((f.code, f.cause, ArchList.of(f.targets).canonical()) for f in findings)


def test_the_exact_list_passes(tmp_path: Path) -> None:
    result = judge(_inspect(tmp_path, [UNIT, UNIT]), ArchList.parse(BASE))
    assert result.passed
    assert not result.missing
    assert not result.extra
    assert result.found == ArchList.parse(BASE)


@pytest.mark.parametrize(
    ("units", "kw", "expected", "glob", "findings"),
    [
        # a build with its own list: extra and missing are both the build's override
        ([["sm_80", "sm_86", "compute_86"]], {}, BASE, None,
         [("extra", Cause.BUILD_OVERRIDE, "sm_86;compute_86"), ("missing", Cause.BUILD_OVERRIDE, "sm_90;compute_90")]),
        # PTX alone: the PTX target is an extra, the SASS is missing
        ([["compute_80"]], {}, "sm_80", None,
         [("extra", Cause.BUILD_OVERRIDE, "compute_80"), ("missing", Cause.BUILD_OVERRIDE, "sm_80")]),
        # the PTX of the newest arch dropped
        ([["sm_80", "sm_90"]], {}, BASE, None, [("missing", Cause.BUILD_OVERRIDE, "compute_90")]),
        # an unrequested PTX
        ([[*UNIT, "compute_80"]], {}, BASE, None, [("extra", Cause.BUILD_OVERRIDE, "compute_80")]),
        # a missing target of an extension with its own list (the recipe's map)
        ([["sm_90a"]], {}, "sm_90a;compute_90a", "*_C*.so", [("missing", Cause.RECIPE_OVERRIDE, "compute_90a")]),
        # nvcc's default pair in one unit: the arch flags never reached nvcc
        ([["sm_75", "compute_75"]], {}, BASE, None,
         [("extra", Cause.NVCC_DEFAULT, "sm_75;compute_75"), ("missing", Cause.NVCC_DEFAULT, BASE)]),
        # a lone sm_75 is someone's list, not nvcc's default
        ([[*UNIT, "sm_75"]], {}, BASE, None, [("extra", Cause.BUILD_OVERRIDE, "sm_75")]),
        # the empty cubins of an nvcc device link
        ([UNIT], {"stubs": [["sm_75"]]}, BASE, None, [("extra", Cause.DEVICE_LINK_STUB, "sm_75")]),
        # -rdc: the PTX stays in the relocatable fatbin, which is never loaded
        ([["sm_80", "sm_90"]], {"relocatable": [UNIT]}, BASE, None, [("missing", Cause.RDC_LINK, "compute_90")]),
        # one translation unit built with other flags
        ([UNIT, ["sm_80"]], {}, BASE, None, [("incomplete-tu", Cause.TU_FLAGS, "sm_90;compute_90")]),
        # no device code at all in a CUDA package's extension
        ([], {}, BASE, None, [("no-device-code", Cause.NO_CUDA, BASE)]),
        # the family variant is a target of its own: sm_100f is not sm_100
        ([["sm_100f"]], {}, "sm_100", None,
         [("extra", Cause.BUILD_OVERRIDE, "sm_100f"), ("missing", Cause.BUILD_OVERRIDE, "sm_100")]),
    ],
)
def test_each_rule_names_its_targets_and_cause(tmp_path: Path, units: list[list[str]], kw: dict[str, list[list[str]]],
                                               expected: str, glob: str | None,
                                               findings: list[tuple[str, Cause, str]]) -> None:
    result = judge(_inspect(tmp_path, units, **kw), ArchList.parse(expected), expected_from=glob)
    assert not result.passed
    assert _codes(result) == sorted(findings)
    for code, _, targets in findings:
        if code == "missing":
            assert result.missing.canonical() == targets
        if code == "extra" and len({c for c, _, _ in findings if c == "extra"}) == 1:
            assert result.extra.canonical() == targets


def test_a_stub_with_the_units_target_is_not_an_extra(tmp_path: Path) -> None:
    """A device-link stub of a requested arch adds nothing unrequested."""
    assert judge(_inspect(tmp_path, [UNIT], stubs=[["sm_80"]]), ArchList.parse(BASE)).passed


def test_host_only_extension_rules(tmp_path: Path) -> None:
    host = _inspect(tmp_path, [])
    assert judge(host, ArchList(frozenset())).passed  # host-only by design (the recipe's map says so)
    assert judge(host, ArchList.parse(BASE), cuda_package=False).passed  # a package without CUDA


def test_readers_disagreeing_is_a_finding_of_its_own(tmp_path: Path) -> None:
    insp = dataclasses.replace(_inspect(tmp_path, [UNIT]), disagreement="cuobjdump lists sm_86 that the headers do not")
    result = judge(insp, ArchList.parse(BASE))
    assert _codes(result) == [("readers-disagree", Cause.READERS, "")]


def test_no_extension_and_the_jit_exemption(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b""})
    report = assert_inspection(wheel.name, (), Expected(ArchList.parse(BASE)))
    assert not report.passed
    assert [f.cause for f in report.findings] == [Cause.NO_EXTENSIONS]
    assert assert_inspection(wheel.name, (), Expected(ArchList.parse(BASE), allow_no_extensions=True)).passed


def test_per_extension_map_first_match_wins(tmp_path: Path) -> None:
    sm90 = inspect_file(shared_object(tmp_path / "a.so", [["sm_90a", "compute_90a"]]), Reader.NATIVE,
                        label="demo/_qattn_sm90.so")
    main = _inspect(tmp_path, [UNIT])
    per = Expected(ArchList.parse(BASE), per_extension=(("*_qattn_*", ArchList.parse("9.0a+PTX")),
                                                         ("*.so", ArchList.parse("7.5"))))
    report = assert_inspection("demo.whl", (main, sm90), per)
    assert [(e.path, e.expected_from, e.passed) for e in report.extensions] == [
        (EXT, "*.so", False), ("demo/_qattn_sm90.so", "*_qattn_*", True)]
    assert not assert_inspection("demo.whl", (sm90,), Expected(ArchList.parse(BASE))).passed


def test_bundled_library_rules(tmp_path: Path) -> None:
    """A bundled library must be declared, and hold its declared list unless exempt."""
    lib = "demo.libs/libextra-12ab.so.1"
    main = _inspect(tmp_path, [UNIT])
    bundled = inspect_file(shared_object(tmp_path / "lib.so", [["sm_90a", "compute_90a"]]), Reader.NATIVE, label=lib)
    expected = Expected(ArchList.parse(BASE))

    def problem(rules: tuple[VendoredRule, ...]) -> str | None:
        report = assert_inspection("demo.whl", (main,), replace(expected, vendored=rules), vendored=(bundled,))
        (result,) = report.vendored_results
        assert report.passed == (result.problem is None)
        return result.problem

    assert "the recipe does not declare it" in (problem(()) or "")
    other = problem((VendoredRule("libextra*", ArchList.parse(BASE)),)) or ""
    assert "missing sm_80;sm_90;compute_90, extra sm_90a;compute_90a" in other
    assert problem((VendoredRule("libextra*", ArchList.parse("9.0a+PTX")),)) is None
    assert problem((VendoredRule(lib, None, "NVIDIA's build"),)) is None
    assert "host-only" in (problem((VendoredRule("lib*", ArchList(frozenset())),)) or "")
    # the first matching rule wins
    assert problem((VendoredRule("libextra*", None, "x"), VendoredRule("*", ArchList.parse(BASE)))) is None
    split = dataclasses.replace(bundled, disagreement="cuobjdump differs")
    report = assert_inspection("demo.whl", (main,), replace(expected, vendored=(VendoredRule("*", None, "x"),)),
                               vendored=(split,))
    assert not report.passed
    assert "disagree" in (report.vendored_results[0].problem or "")


def test_the_wheel_path_reads_the_binaries_it_judges(tmp_path: Path) -> None:
    """The wheel's members are read as the assertion reads them (here with the native reader:
    assert_wheel adds cuobjdump, which the slow tier runs)."""
    so = shared_object(tmp_path / "so" / "x.so", [UNIT, ["sm_80"]])
    wheel = make_wheel(tmp_path, "demo", "1.0", {"demo/__init__.py": b"", EXT: so})
    insp = inspect_wheel(wheel, Reader.NATIVE)
    report = assert_inspection(str(wheel), insp.extensions, Expected(ArchList.parse(BASE)))
    assert [(f.code, f.cause) for f in report.extensions[0].findings] == [("incomplete-tu", Cause.TU_FLAGS)]
