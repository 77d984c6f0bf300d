"""The variant properties of an asserted wheel: each ``sm_arch`` value only where every GPU it
names runs the wheel, the driver bound of the CUDA line (and of its PTX where a GPU JITs)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.model.arch import ArchList
from farm.model.driver import Device, ImageKind, pick_worst
from farm.provenance import stamp
from farm.provenance.buildinfo import LEDGER_KEYS, BuildInfo
from farm.publish import variantchannel
from farm.publish.variants import MAJORS, LeftOut, VariantProps, admitted, properties, sm_arch_values
from tests.support.ledgermaker import make_entry
from tests.support.publishfix import fresh_venv, serve_dir
from tests.support.wheelmaker import make_wheel


def _info(*found: str, cuda: str = "13.0", nvcc: str | None = "13.0.88", **changes: Any) -> BuildInfo:
    entry = make_entry("alpha", cuda=cuda, torch="none", arch=found[0] if found else "sm_80")
    data = {k: v for k, v in entry.items() if k not in LEDGER_KEYS}
    data["found"] = {f"alpha/_C{i}.so": arch for i, arch in enumerate(found)}
    data["toolchain"]["nvcc"] = nvcc
    data.update(changes)
    return BuildInfo.from_json(data)


def _props(*found: str, **kw: Any) -> VariantProps:
    got = properties(_info(*found, **kw))
    assert isinstance(got, VariantProps), got
    return got


def test_sass_targets_name_their_majors_from_their_minor_up() -> None:
    assert _props("sm_80;sm_86;sm_90").sm_arch == ("80_real", "86_real", "90_real")
    assert _props("sm_90").sm_arch == ("90_real",)
    assert _props("sm_90").lower_bound == "13.0"  # the CUDA 13.x runtime: R580


def test_ptx_names_each_later_major_it_serves_whole() -> None:
    p = _props("sm_80;compute_80")
    assert p.sm_arch == ("80_real", "90_virtual", "100_virtual", "110_virtual", "120_virtual")
    # compute_86 serves 8.6 up: major 8 is not served whole (8.0 to 8.5 get nothing)
    assert _props("compute_86").sm_arch == ("90_virtual", "100_virtual", "110_virtual", "120_virtual")


def test_the_driver_bound_is_the_runtimes_unless_a_gpu_jits() -> None:
    assert _props("sm_80;sm_90", cuda="12.8", nvcc="12.8.93").lower_bound == "12.0"  # R525
    # a GPU the values name JIT-compiles PTX ISA 8.7: the driver of CUDA 12.8 (R570)
    assert _props("sm_80;sm_90;compute_90", cuda="12.8", nvcc="12.8.93").lower_bound == "12.8"
    # the ISA the device code records wins over the nvcc's
    made_by = {"alpha/_C0.so": {"cubin": {}, "ptx_isa": {"8.5": 1}, "unread": 0}}
    assert _props("sm_80;compute_80", cuda="12.8", nvcc="12.8.93", made_by=made_by).lower_bound == "12.5"


def test_arch_specific_sass_is_claimed_only_with_the_rest_of_its_major() -> None:
    # sm_90a runs on 9.0 alone; 90_real would also name 9.1 to 9.9
    assert properties(_info("sm_90a")) == LeftOut(
        "no sm_arch value of NVIDIA's provider names only GPUs its targets (sm_90a) run on")
    # with compute_80 beside it every 9.x runs the wheel, 9.0 the SASS and the others the PTX: a
    # 9.0 GPU matches it through 90_virtual (90_real would claim SASS for 9.1 too)
    assert _props("sm_80;sm_90a;compute_80").sm_arch[:2] == ("80_real", "90_virtual")
    # sm_100a: 10.3 exists and does not run it
    assert "100_real" not in _props("sm_90;sm_100a").sm_arch
    # family-specific SASS runs on its major from its minor up: the same GPUs as the plain value
    assert _props("sm_100f").sm_arch == ("100_real",)
    assert _props("sm_100f;sm_103f").sm_arch == ("100_real", "103_real")
    # compute_90a JITs on 9.0 alone: no value
    assert _props("sm_80;compute_90a").sm_arch == ("80_real",)


def test_every_extension_must_run() -> None:
    """One extension without an image for a GPU fails its kernels there."""
    p = _props("sm_80;sm_90", "sm_86;sm_90")
    assert p.sm_arch == ("86_real", "90_real")  # 8.0 to 8.5: the second extension has nothing


def test_what_has_no_variant() -> None:
    assert properties(_info("sm_80", provenance="inferred")) == LeftOut("not an asserted wheel")
    assert properties(_info()) == LeftOut("its provenance records no device code")
    assert properties(_info("")) == LeftOut("its provenance records no device code")
    assert properties(_info("sm_75", cuda="10.2", nvcc=None)) == LeftOut("no known driver requirement for CUDA 10.2")


def test_values_are_the_providers() -> None:
    assert admitted("90_real") == [Device(9, m) for m in range(10)]
    assert admitted("86_real") == [Device(8, 6), Device(8, 7), Device(8, 8), Device(8, 9)]
    assert admitted("100_virtual") == [Device(10, m) for m in range(10)]
    assert _props("sm_80").properties() == [("nvidia", "sm_arch", "80_real"),
                                            ("nvidia", "cuda_version_lower_bound", "13.0")]


_TARGETS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_103",
            "sm_120", "sm_120f", "compute_75", "compute_80", "compute_86", "compute_90", "compute_90a",
            "compute_100f", "compute_120"]


@given(st.lists(st.sets(st.sampled_from(_TARGETS), min_size=1), min_size=1, max_size=3))
def test_a_variant_never_installs_where_it_would_fail(units: list[set[str]]) -> None:
    """Every GPU the provider would match to any value runs the wheel, by farm's driver model."""
    lists = [ArchList.parse(";".join(sorted(u))) for u in units]
    values, _ = sm_arch_values(lists)
    for value in values:
        for d in admitted(value):
            assert pick_worst(lists, d).kind is not ImageKind.NONE, (value, d)
    # and each GPU of the provider's range that runs SASS of every extension is matched
    for major in MAJORS:
        for minor in range(10):
            d = Device(major, minor)
            if all(pick_worst([u], d).kind is ImageKind.SASS for u in lists) and not any(
                    t.variant.value == "a" for u in lists for t in u):
                assert any(d in admitted(v) for v in values), d


@pytest.mark.parametrize("found", ["sm_80;sm_90;compute_90", "sm_75;sm_80;sm_86;sm_89;sm_90;sm_100;sm_120;compute_120"])
def test_the_policy_lists_get_a_variant(found: str) -> None:
    p = _props(found)
    assert p.sm_arch[0] == f"{found.split(';', maxsplit=1)[0][3:]}_real"
    assert p.sm_arch[-1] in {"120_virtual", "120_real"}


# -- how uv 0.13.9's built-in NVIDIA provider matches values, which this module relies on -------
PROBES = [  # (sm_arch value, lower bound, GPU, driver's CUDA version)
    ("90_real", "12.0", "9.0", "13.0"), ("90_real", "12.0", "8.9", "13.0"), ("90_real", "12.0", "10.0", "13.0"),
    ("86_real", "12.0", "8.9", "13.0"), ("86_real", "12.0", "8.6", "13.0"), ("86_real", "12.0", "8.0", "13.0"),
    ("80_virtual", "12.0", "8.9", "13.0"), ("80_virtual", "12.0", "9.0", "13.0"),
    ("100_virtual", "12.0", "10.3", "13.0"),
    ("90a_real", "12.0", "9.0", "13.0"), ("100f_real", "12.0", "10.0", "13.0"),  # no such values: never matched
    ("90_real", "13.0", "9.0", "12.9"), ("90_real", "13.0", "9.0", "13.0"),
]


@pytest.mark.slow  # thirteen uv processes
def test_the_provider_matches_as_this_module_says(tmp_path: Path) -> None:
    """Each probe is a package with one variant wheel of one sm_arch value and one lower bound,
    installed by uv 0.13.9 with the GPU and driver NVIDIA's provider detects forced: it installs
    exactly where :func:`admitted` and the bound say."""
    tree = tmp_path / "simple"
    for i, (value, bound, _, _) in enumerate(PROBES):
        name = f"probe{i}"
        label, vjson = variantchannel.dist_info(VariantProps((value,), bound))
        base = make_wheel(tmp_path / "base", name, "1.0", {f"{name}/__init__.py": b""}, tag="py3-none-any")
        folder = tree / name
        folder.mkdir(parents=True)
        with (folder / f"{name}-1.0-py3-none-any-{label}.whl").open("wb") as fh:
            stamp.add_to_dist_info(base, fh, "variant.json", vjson)
        (folder / f"{name}-1.0-variants.json").write_bytes(variantchannel.versions_json([vjson]))
        (folder / "index.html").write_text("".join(
            f'<a href="{p.name}#sha256={hashlib.sha256(p.read_bytes()).hexdigest()}">{p.name}</a>\n'
            for p in sorted(folder.iterdir())))
    server, url = serve_dir(tmp_path, tmp_path / "http.log")
    python = fresh_venv(tmp_path / "venv")
    uv = Path(sys.executable).with_name("uv")
    try:
        for i, (value, bound, gpu, driver) in enumerate(PROBES):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("NV_VARIANT_PROVIDER_", "UV_"))}
            env |= {"NV_VARIANT_PROVIDER_FORCE_SM_ARCH": gpu, "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver}
            proc = subprocess.run([str(uv), "pip", "install", "--no-config", "--no-cache", "--python", str(python),
                                   "--preview-features", "wheel-variants", "--index-url", f"{url}/simple/",
                                   f"probe{i}"], capture_output=True, text=True, env=env, check=False)
            device = Device.parse(gpu)
            matches = re.fullmatch(r"\d+_(real|virtual)", value) is not None and device in admitted(value)
            want = matches and tuple(map(int, driver.split("."))) >= tuple(map(int, bound.split(".")))
            assert (proc.returncode == 0) == want, (value, bound, gpu, driver, proc.stderr)
    finally:
        server.stop()
