"""The Actions cache plan: each key's size measured where an index answers, estimated (and said
so) where none does, the total against GitHub's 10 GB; and the measuring itself, against a
PEP 691 index and a redist manifest served on 127.0.0.1.

PyPI and NVIDIA's download site are not what the test reads: the loopback index serves PyPI's
documented shapes (PEP 691 JSON pages with PEP 700 ``size``, PEP 658 ``.metadata`` beside some
wheels and not others, HTTP range requests on the files as files.pythonhosted.org answers them),
and the manifest NVIDIA's ``redistrib_<release>.json`` layout."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import parse_wheel_filename

from farm.cli import main
from farm.errors import UsageError
from farm.load.recipes import load_config
from farm.model.config import ToolkitConfig, ToolkitLine
from farm.schedule.cacheplan import (
    CACHE_LIMIT_BYTES,
    DATA,
    ESTIMATE_COMPONENT_BYTES,
    ESTIMATE_TORCH_BYTES,
    CacheSizes,
    ComponentSize,
    ToolkitKey,
    TorchKey,
    TorchSize,
    cache_plan,
    toolkit_size,
    torch_size,
)
from farm.schedule.cachesizes import Index, measure_toolkit, measure_torch
from tests.support import loopback
from tests.support.redisttree import write_manifest
from tests.support.wheelmaker import make_wheel

REPO = Path(__file__).resolve().parent.parent

SIZES = CacheSizes(
    "2026-01-01", "https://pypi.org/simple/",
    torch=(TorchSize("linux_x86_64", "2.8.0", "12.8", "torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                     3_900_000_000, {"nvidia-cublas-cu12==12.8.4.1": 600_000_000}),
           TorchSize("linux_aarch64", "2.8.0", None, "torch-2.8.0-cp312-cp312-manylinux_2_28_aarch64.whl",
                     100_000_000, {})),
    toolkit=(ComponentSize("13.0", "linux_x86_64", "cuda_nvcc", "nvidia_cuda_nvcc-13.0.88.whl", 40_000_000),
             ComponentSize("13.0", "linux_x86_64", "cuda_cudart", "nvidia_cuda_runtime-13.0.96.whl", 2_000_000),
             ComponentSize("13.0", "linux_aarch64", "cuda_nvcc", "nvidia_cuda_nvcc-13.0.88.whl", 38_000_000)),
)


def test_a_toolkit_key_is_measured_only_when_every_component_is() -> None:
    full = toolkit_size(ToolkitKey("13.0", "linux_x86_64", ("cuda_cudart", "cuda_nvcc")), SIZES)
    assert (full.bytes, full.measured) == (42_000_000, True)
    # aarch64 lacks cudart: nvcc measured, cudart from the x86_64 measurement
    part = toolkit_size(ToolkitKey("13.0", "linux_aarch64", ("cuda_cudart", "cuda_nvcc")), SIZES)
    assert (part.bytes, part.measured) == (40_000_000, False)
    assert "cuda_cudart" in part.basis
    # a component never measured: the constant
    none = toolkit_size(ToolkitKey("12.8", "win_amd64", ("libcublas",)), SIZES)
    assert (none.bytes, none.measured) == (ESTIMATE_COMPONENT_BYTES, False)


def test_a_torch_key_is_measured_only_for_pypis_own_cuda_line() -> None:
    assert torch_size(TorchKey("linux_x86_64", "12.8", "2.8.0"), SIZES).measured
    other = torch_size(TorchKey("linux_x86_64", "12.6", "2.8.0"), SIZES)
    assert (other.bytes, other.measured) == (3_900_000_000, False)
    assert "CUDA 12.8 build" in other.basis
    # PyPI's aarch64 torch 2.8 is a CPU build: not a size for a CUDA key
    cpu = torch_size(TorchKey("linux_aarch64", "12.8", "2.8.0"), SIZES)
    assert (cpu.bytes, cpu.measured) == (ESTIMATE_TORCH_BYTES, False)


def test_the_plan_counts_each_distinct_key_once() -> None:
    keys = [ToolkitKey("13.0", "linux_x86_64", ("cuda_nvcc",))] * 3
    plan = cache_plan(keys, [TorchKey("linux_x86_64", "12.8", "2.8.0"), TorchKey("win_amd64", "12.8", "2.8.0")], SIZES)
    toolkit, torch = plan.rows
    assert (toolkit.keys, toolkit.measured, toolkit.total_bytes) == (1, 1, 40_000_000)
    assert (torch.keys, torch.measured, torch.total_bytes) == (2, 1, 3_900_000_000 + ESTIMATE_TORCH_BYTES)
    assert plan.total_bytes == 40_000_000 + 3_900_000_000 + ESTIMATE_TORCH_BYTES
    assert plan.fits == (plan.total_bytes <= CACHE_LIMIT_BYTES)
    assert not cache_plan(keys, [], SIZES, limit_bytes=1).fits


def test_the_size_table_round_trips_and_refuses_a_bad_one() -> None:
    assert CacheSizes.from_json(json.loads(json.dumps(SIZES.to_json())), "t") == SIZES
    bad = SIZES.to_json()
    bad["torch"][0]["bytes"] = -1
    with pytest.raises(UsageError, match="not a cache-size table"):
        CacheSizes.from_json(bad, "t")


def test_the_committed_table_is_a_measurement() -> None:
    sizes = CacheSizes.from_json(json.loads(DATA.read_text()), str(DATA))
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", sizes.measured_on)
    assert any(t.cuda for t in sizes.torch)  # PyPI's CUDA builds of torch, with their pinned wheels
    assert all(t.bytes > sum(t.requirements.values()) for t in sizes.torch)
    assert {c.cuda for c in sizes.toolkit} >= {"13.0"}


def test_farm_cache_plan_prints_the_grids_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache-plan", "--root", str(REPO), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    toolkit, torch = plan["rows"]
    assert toolkit["keys"] > 17
    assert torch["keys"] > 17
    assert 0 < toolkit["measured"] < toolkit["keys"]
    assert 0 < torch["measured"] < torch["keys"]
    assert plan["total_bytes"] == toolkit["total_bytes"] + torch["total_bytes"]
    assert plan["fits"] is False  # the whole grid never fits 10 GB: docs/ci.md says what does


# -- measuring against a loopback index -----------------------------------------------------------------


class _IndexHandler(loopback.QuietHandler):
    """``/simple/<project>/``: a PEP 691 JSON page of the wheels in ``files/`` (with PEP 700
    sizes; ``core-metadata`` where a ``.metadata`` file lies beside the wheel); ``/files/...``:
    the files, with HTTP range requests answered 206."""

    served_bytes = 0

    def do_GET(self) -> None:
        root = Path(self.directory)
        m = re.fullmatch(r"/simple/([^/]+)/", self.path)
        if m:
            files = []
            for wheel in sorted((root / "files").glob("*.whl")):
                if parse_wheel_filename(wheel.name)[0] != m[1]:
                    continue
                entry: dict[str, Any] = {"filename": wheel.name, "url": f"../../files/{wheel.name}",
                                         "hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
                                         "size": wheel.stat().st_size}
                if wheel.with_name(wheel.name + ".metadata").exists():
                    entry["core-metadata"] = True
                files.append(entry)
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": m[1], "files": files}).encode()
            self._answer(200, body, "application/vnd.pypi.simple.v1+json")
            return
        path = root / self.path.lstrip("/")
        if not path.is_file():
            self._answer(404, b"not found", "text/plain")
            return
        data = path.read_bytes()
        r = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if r:
            start, end = int(r[1]), min(int(r[2]), len(data) - 1)
            self._answer(206, data[start:end + 1], "application/octet-stream")
        else:
            self._answer(200, data, "application/octet-stream")

    def _answer(self, status: int, body: bytes, kind: str) -> None:
        type(self).served_bytes += len(body)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def publish(files: Path, dist: str, version: str, tag: str, requires: tuple[str, ...] = (), *,
            metadata_file: bool = True, payload: bytes = b"") -> Path:
    wheel = make_wheel(files, dist, version, {f"{dist}/__init__.py": payload}, tag=tag, requires=requires)
    if metadata_file:
        with zipfile.ZipFile(wheel) as zf:
            wheel.with_name(wheel.name + ".metadata").write_bytes(zf.read(f"{dist}-{version}.dist-info/METADATA"))
    return wheel


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    files = tmp_path / "files"
    files.mkdir()
    with loopback.serve(tmp_path, _IndexHandler) as url:
        yield url + "simple/", files


LINUX = "py3-none-manylinux_2_28_x86_64"


def test_torch_and_what_it_pins_are_measured_from_the_index(index: tuple[str, Path]) -> None:
    url, files = index
    torch = publish(files, "torch", "9.0.0", "cp312-cp312-manylinux_2_28_x86_64", (
        'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"',
        'meta[a]==1.0; platform_system == "Linux"',
        'winonly==1.0; platform_system == "Windows"',  # not on Linux
        "filelock",  # unbounded, pure Python: left out
    ))
    publish(files, "torch", "9.0.0", "cp311-cp311-manylinux_2_28_x86_64")  # another Python: not taken
    runtime = publish(files, "nvidia_cuda_runtime_cu12", "12.8.90", LINUX, payload=b"r" * 3000)
    publish(files, "nvidia_cuda_runtime_cu12", "12.8.90", "py3-none-win_amd64")
    meta = publish(files, "meta", "1.0", "py3-none-any", ('nvidia-cuda-nvrtc-cu12==12.8.93; extra == "a"',
                                                          'other==1.0; extra == "b"'))
    nvrtc = publish(files, "nvidia_cuda_nvrtc_cu12", "12.8.93", LINUX, payload=b"n" * 2000)
    missing: list[str] = []
    got = measure_torch(Index(url), "linux_x86_64", "9.0.0", missing)
    assert missing == []
    assert got is not None
    assert got.cuda == "12.8"
    assert got.wheel == torch.name
    assert got.requirements == {"nvidia-cuda-runtime-cu12==12.8.90": runtime.stat().st_size,
                                "meta==1.0": meta.stat().st_size,
                                "nvidia-cuda-nvrtc-cu12==12.8.93": nvrtc.stat().st_size}
    assert got.bytes == torch.stat().st_size + sum(got.requirements.values())


def test_without_pep658_metadata_the_wheels_own_is_read_by_ranges(index: tuple[str, Path]) -> None:
    url, files = index
    payload = os.urandom(2 << 20)  # a large wheel, of which only the central directory and METADATA are read
    publish(files, "torch", "9.1.0", "cp312-cp312-manylinux_2_28_x86_64",
            ('nvidia-cublas<=13.1.1.3,>=13.1.0.3; platform_system == "Linux"',
             'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"'), metadata_file=False, payload=payload)
    for version in ("13.1.0.3", "13.1.1.3", "13.2.0"):
        publish(files, "nvidia_cublas", version, LINUX)
    publish(files, "nvidia_cuda_runtime", "13.0.96", LINUX)
    _IndexHandler.served_bytes = 0
    missing: list[str] = []
    got = measure_torch(Index(url), "linux_x86_64", "9.1.0", missing)
    assert got is not None, missing
    assert got.cuda == "13.0"
    assert set(got.requirements) == {"nvidia-cublas==13.1.1.3", "nvidia-cuda-runtime==13.0.96"}  # the highest in range
    assert _IndexHandler.served_bytes < 200_000


def test_what_cannot_be_measured_is_listed_not_guessed(index: tuple[str, Path]) -> None:
    url, files = index
    publish(files, "torch", "9.2.0", "cp312-cp312-manylinux_2_28_x86_64",
            ('nvidia-cudnn-cu12==9.0; platform_system == "Linux"',))
    missing: list[str] = []
    got = measure_torch(Index(url), "linux_x86_64", "9.2.0", missing)
    assert got is not None
    assert got.requirements == {}
    assert missing == ["torch 9.2.0 linux_x86_64: no linux_x86_64 wheel of nvidia-cudnn-cu12==9.0"]
    assert measure_torch(Index(url), "win_amd64", "9.2.0", missing) is None
    assert "no cp312 wheel" in missing[-1]


def test_redist_component_sizes_come_from_the_pinned_manifest(index: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = index
    redist = tmp_path / "redist"
    redist.mkdir()
    entry: dict[str, object] = {"relative_path": "cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz",
             "sha256": "0" * 64, "md5": "0" * 32, "size": "81234567"}
    manifest = write_manifest(redist, "12.8.1", {"cuda_nvcc": ("12.8.93", entry)})
    pin = hashlib.sha256(manifest.read_bytes()).hexdigest()
    config = load_config(REPO)

    def with_line(sha256: str) -> Any:
        line = ToolkitLine("12.8", "12.8.1", sha256, "redist", ("cuda_nvcc",), {}, "test")
        toolkit = ToolkitConfig(redist_url="https://unused.invalid/", lines={"12.8": line})
        return replace(config, defaults=replace(config.defaults, toolkit=toolkit, platforms=("linux_x86_64",)))

    with loopback.serve(redist) as root:
        missing: list[str] = []
        got = measure_toolkit(with_line(pin), Index(url), missing, {"FARM_CUDA_REDIST_URL": root})
        assert missing == []
        assert got == [ComponentSize("12.8", "linux_x86_64", "cuda_nvcc",
                                     "cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz", 81234567)]
        # another manifest than the pinned one measures nothing
        assert measure_toolkit(with_line("f" * 64), Index(url), missing, {"FARM_CUDA_REDIST_URL": root}) == []
        assert "is not the pinned manifest" in missing[-1]


def test_farm_cache_plan_measure_rewrites_the_table(index: tuple[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url, _ = index
    monkeypatch.setenv("FARM_CUDA_REDIST_URL", url + "nothing/")
    out = tmp_path / "sizes.json"
    with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
        assert main(["cache-plan", "--root", str(REPO), "--measure", "--index", url, "--sizes", str(out)]) == 0
    sizes = CacheSizes.from_json(json.loads(out.read_text()), str(out))
    assert sizes.index == url
    assert sizes.torch == ()  # the loopback index has no torch: everything is listed as not measured
    assert any("torch 2.8.0 linux_x86_64" in m for m in sizes.not_measured)
    assert "not measured" in err.getvalue()

