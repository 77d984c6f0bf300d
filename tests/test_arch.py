from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.errors import ArchError
from farm.model.arch import (
    KNOWN_CUDA_LINES,
    ArchList,
    Kind,
    Rendering,
    Target,
    Variant,
    render,
    supported_targets,
    unsupported,
    validate_for_cuda,
)


def names(text: str) -> list[str]:
    return ArchList.parse(text).names()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX",
         ["sm_75", "sm_80", "sm_86", "sm_90", "compute_90", "sm_100", "sm_120", "compute_120"]),
        ("8.0 8.6 8.9 9.0a 12.0+PTX", ["sm_80", "sm_86", "sm_89", "sm_90a", "sm_120", "compute_120"]),
        ("  8.0 ;\t9.0+PTX ;; ", ["sm_80", "sm_90", "compute_90"]),
        ("10.0f;12.0a+PTX", ["sm_100f", "sm_120a", "compute_120a"]),
        ("Ampere", ["sm_80", "sm_86", "compute_86"]),
        ("sm_90a;compute_89", ["compute_89", "sm_90a"]),
        ("8.0 8.0 8.0+PTX", ["sm_80", "compute_80"]),
    ],
)
def test_parse_forms(text: str, expected: list[str]) -> None:
    assert names(text) == expected


@pytest.mark.parametrize("bad", ["", "  ;  ", "8", "sm_9", "8.0b", "9.0+ptx+PTX", "compute_", "eight", "8.10"])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ArchError):
        ArchList.parse(bad)


def test_parse_error_names_the_item_and_where() -> None:
    with pytest.raises(ArchError) as err:
        ArchList.parse("8.0;9.x", where="packages/x.yml:4")
    assert "'9.x'" in str(err.value)
    assert "packages/x.yml:4" in str(err.value)


def test_unknown_arches_are_typos() -> None:
    for bad in ("9.9", "sm_99", "compute_45", "8.5+PTX"):
        with pytest.raises(ArchError, match="not a GPU arch any nvcc knows"):
            ArchList.parse(bad)
    assert ArchList.parse("3.7+PTX;5.0").names() == ["sm_37", "compute_37", "sm_50"]  # old, but real


def test_renderings_for_a_packages_own_variable() -> None:
    archs = ArchList.parse("8.0 8.6 9.0a 10.0a 12.0")
    assert render(archs, Rendering.VERSIONS) == "8.0;8.6;9.0;10.0;12.0"
    assert render(archs, Rendering.NUMBERS) == "80;86;90;100;120"
    assert render(archs, Rendering.TORCH) == archs.render_torch()
    assert render(archs, Rendering.CMAKE) == archs.render_cmake()
    with pytest.raises(ArchError, match="SASS arches only"):
        render(ArchList.parse("8.0;9.0+PTX"), Rendering.VERSIONS)


def test_target_fields() -> None:
    t = Target.from_name("sm_100f")
    assert (t.major, t.minor, t.variant, t.kind) == (10, 0, Variant.FAMILY, Kind.SASS)
    assert t.cuda_arch == 1000
    assert t.name == "sm_100f"
    assert Target.from_name("compute_90").kind is Kind.PTX


def test_renderers() -> None:
    archs = ArchList.parse("7.5;8.0;9.0+PTX;9.0a")
    assert archs.render_torch() == "7.5;8.0;9.0+PTX;9.0a"
    assert archs.render_cmake() == "75-real;80-real;90;90a-real"
    assert ArchList.parse("compute_89").render_cmake() == "89-virtual"


def test_torch_rendering_refuses_what_torch_rejects() -> None:
    with pytest.raises(ArchError, match="family"):
        ArchList.parse("10.0f").render_torch()
    with pytest.raises(ArchError):
        ArchList.parse("8.6a").render_torch()
    with pytest.raises(ArchError, match="cannot be written"):
        ArchList.parse("compute_89").render_torch()


@pytest.mark.parametrize("text", ["8.8", "10.1", "10.1a", "8.9a", "12.0;8.8+PTX"])
def test_torch_rendering_refuses_arches_torch_does_not_know(text: str) -> None:
    # nvcc builds 8.8 (CUDA 13) and 10.1 (12.8/12.9), but torch's list of 27 raises "Unknown CUDA arch".
    with pytest.raises(ArchError, match="does not accept"):
        ArchList.parse(text).render_torch()


def test_torch_rendering_accepts_every_item_torch_knows() -> None:
    items = ["3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6",
             "8.7", "8.9", "9.0", "9.0a", "10.0", "10.0a", "11.0", "11.0a", "10.3", "10.3a", "12.0",
             "12.0a", "12.1", "12.1a"]
    for item in items:
        assert ArchList.parse(item).render_torch() == item
        assert ArchList.parse(item + "+PTX").render_torch() == item + "+PTX"


def test_support_tables() -> None:
    assert (75, "") in supported_targets("13.0")
    assert (70, "") not in supported_targets("13.0")
    assert (101, "") in supported_targets("12.8")
    assert (101, "") not in supported_targets("13.0")
    assert (110, "") in supported_targets("13.0")
    assert (100, "f") in supported_targets("12.9")
    assert (100, "f") not in supported_targets("12.8")
    assert unsupported(ArchList.parse("7.0;7.5;10.1"), "13.0") == [Target(7, 0), Target(10, 1)]


def test_validate_explains_why() -> None:
    with pytest.raises(ArchError) as err:
        validate_for_cuda(ArchList.parse("7.0;10.1;12.0"), "13.0", where="cell x")
    text = str(err.value)
    assert "sm_70" in text
    assert "sm_101" in text
    assert "starts at sm_75" in text
    assert "became sm_110" in text
    with pytest.raises(ArchError, match="12.9"):
        validate_for_cuda(ArchList.parse("10.0f"), "12.8")
    validate_for_cuda(ArchList.parse("7.5;8.0;8.6;9.0+PTX;10.0;12.0+PTX"), "13.0")
    with pytest.raises(ArchError, match="no nvcc support table"):
        supported_targets("11.8")


# -- property tests ---------------------------------------------------------------------------
_arches = st.sampled_from(
    [(7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1), (5, 0)]
)
_targets = st.builds(
    lambda mm, v, k: Target(mm[0], mm[1], v, k),
    _arches,
    st.sampled_from(list(Variant)),
    st.sampled_from(list(Kind)),
)
_lists = st.frozensets(_targets, min_size=1, max_size=12).map(ArchList)


@given(_lists)
def test_canonical_round_trips(archs: ArchList) -> None:
    assert ArchList.parse(archs.canonical()) == archs


@given(_lists)
def test_list_syntax_round_trips_when_expressible(archs: ArchList) -> None:
    try:
        text = archs.to_list_syntax()
    except ArchError:
        assert any(not any(s.kind is Kind.SASS and s.without_variant() == p.without_variant().with_kind(Kind.SASS)
                           and s.variant == p.variant for s in archs) for p in archs.ptx)
        return
    assert ArchList.parse(text) == archs
    # separators are interchangeable
    assert ArchList.parse(text.replace(";", " ")) == archs


@given(_lists)
def test_cmake_rendering_round_trips(archs: ArchList) -> None:
    rebuilt = set()
    for item in archs.render_cmake().split(";"):
        base, _, suffix = item.partition("-")
        num, variant = (base[:-1], base[-1]) if base[-1] in "af" else (base, "")
        t = Target(int(num) // 10, int(num) % 10, Variant(variant))
        if suffix in ("", "real"):
            rebuilt.add(t)
        if suffix in ("", "virtual"):
            rebuilt.add(t.with_kind(Kind.PTX))
    assert ArchList.of(rebuilt) == archs


def test_every_known_line_has_a_table() -> None:
    for line in KNOWN_CUDA_LINES:
        assert supported_targets(line)


def test_support_table_matches_the_real_nvcc(nvcc, tmp_path) -> None:
    """The table of the toolkit's own CUDA line equals what its nvcc accepts (``--dryrun``
    rejects an unknown -gencode target without compiling anything)."""
    version = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"release (\d+\.\d+)", version)
    assert release, version
    line = release[1]
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    accepted = set()
    for num in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121):
        for variant in ("", "a", "f"):
            target = f"{num}{variant}"
            proc = subprocess.run(
                [str(nvcc), "--dryrun", f"-gencode=arch=compute_{target},code=sm_{target}", "-c", str(src),
                 "-o", str(tmp_path / "k.o")], capture_output=True, text=True, check=False)
            if proc.returncode == 0:
                accepted.add((num, variant))
    assert accepted == set(supported_targets(line))
