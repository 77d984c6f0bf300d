"""Concurrent publishers: N `farm upload` processes of different wheels into one index and one
ledger all publish, each with exit 0 (one lock holds a whole publish: index and ledger)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerfiles import ledger_location
from tests.support.postbuildfix import Batch
from tests.support.publishfix import write_farm_root

N = 8


def _epoch_variants(batch: Batch, work: Path) -> list[Path]:
    """N distinct stamped wheels of one build: the same raw wheel postbuilt at epochs 1..N
    (the build tag makes distinct file names and exists-keys)."""
    from farm.binary.archrule import Expected
    from farm.model.arch import ArchList
    from farm.model.cells import Cell
    from farm.provenance import buildinfo, probe
    from farm.provenance.postbuild import BuildContext, postbuild_wheel
    from tests.support.publishfix import ARCH

    info = json.loads(batch.fragment.read_text())
    cell = Cell("demo_ext", "0.1.0", info["cell"]["cuda"], "none", info["cell"]["python"], info["cell"]["platform"])
    base = BuildContext(cell=cell, expected=Expected(ArchList.parse(ARCH)), requested=ARCH, build_epoch=0,
                        defaults_sha256=None, recipe_sha256=None,
                        source=buildinfo.PathSourceRecord("examples/demo_ext", None), run=probe.run_from_env({}),
                        toolchain=buildinfo.Toolchain.from_mapping(info["toolchain"]))
    dirs = []
    for epoch in range(1, N + 1):
        out = work / f"out{epoch}"
        result = postbuild_wheel(batch.raw, out, replace(base, build_epoch=epoch), dist="demo_ext")
        assert result.passed
        assert result.fragment
        dirs.append(out)
    return dirs


def test_concurrent_uploads_of_different_wheels_all_publish(demo_batch: Batch, tmp_path: Path) -> None:
    root = tmp_path / "farm"
    root.mkdir()
    write_farm_root(root)
    dirs = _epoch_variants(demo_batch, tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "farm.cli", "upload", str(d), "--root", str(root),
                               "--target", "index"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for d in dirs]
    # communicate() reads both pipes to the end and closes them (no leaked file objects)
    outputs = [p.communicate(timeout=600) for p in procs]
    results = [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    assert [rc for rc, _, _ in results] == [0] * N, [err for _, _, err in results]
    names = sorted(next(d.glob("*.whl")).name for d in dirs)
    ledger = LedgerIndex.load(ledger_location(root))
    assert len(ledger) == N
    assert all(ledger.by_filename(n) is not None for n in names)
    listed = json.loads((root / "public" / "index" / "packages.json").read_text())["files"]
    assert sorted(listed) == names
    assert not list((root / "public" / "index").rglob("*.tmp"))
    assert not list(root.glob(".*.tmp"))
