"""A bundled CUDA library (auditwheel's ``<dist>.libs/``) built for other arches than the recipe
declares is caught by every check a wheel meets: ``farm assert``, ``farm postbuild``, the upload
gate and ``farm audit``; a declared one is recorded with its found targets in _build_info.json."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from farm.cli import main
from farm.provenance import buildinfo
from farm.provenance.buildinfo import BuildInfo
from farm.provenance.ledgerwrite import write_fragment
from farm.provenance.stamp import stamp_wheel
from tests.support.cudafix import CudaFixtures
from tests.support.postbuildfix import Batch
from tests.support.publishfix import ARCH, write_farm_root

LIB = "demo_ext.libs/libkern-1a2b3c4d.so.1"


def _with_library(raw: Path, lib: Path, dest: Path) -> Path:
    """The builder's wheel with a bundled library added, its RECORD still valid."""
    data = lib.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    dest.mkdir(parents=True)
    out = dest / raw.name
    with zipfile.ZipFile(raw) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            body = zin.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                body += f"{LIB},sha256={digest},{len(data)}\n".encode()
            zout.writestr(item.filename, body)
        zout.writestr(LIB, data)
    return out


def _recipe(root: Path, vendored: str | None) -> None:
    write_farm_root(root)
    if vendored is not None:
        path = root / "packages" / "demo_ext.yml"
        path.write_text(path.read_text() + f"vendored:\n  {vendored}\n")


def test_a_bundled_library_for_other_arches_is_caught_everywhere(
        demo_batch: Batch, cuda_fixtures: CudaFixtures, cuda_home: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    raw = _with_library(demo_batch.raw, cuda_fixtures.path("sm90a"), tmp_path / "raw")  # sm_90a + compute_90a
    root = tmp_path / "farm"

    # farm assert: an undeclared bundled library fails (it was "not asserted" before)
    assert main(["assert", str(raw), "--arch-list", ARCH]) == 1
    assert f"{LIB} (bundled library): FAILED" in capsys.readouterr().out

    # farm postbuild: undeclared, then declared for other arches: exit 1, nothing written
    post = ["postbuild", str(raw), "--root", str(root), "--cuda-home", str(cuda_home)]
    for vendored in (None, f"'libkern*': '{ARCH}'"):
        _recipe(root, vendored)
        assert main([*post, "--out", str(tmp_path / "refused")]) == 1
        out = capsys.readouterr()
        assert "libkern" in out.out
        assert "nothing was written" in out.err
        assert not (tmp_path / "refused").exists() or not list((tmp_path / "refused").iterdir())

    # declared with what it holds: stamped, and recorded with its found targets
    _recipe(root, "'libkern*': '9.0a+PTX'")
    dist = tmp_path / "dist"
    assert main([*post, "--out", str(dist)]) == 0
    capsys.readouterr()
    (stamped,) = dist.glob("*.whl")
    with zipfile.ZipFile(stamped) as zf:
        info = json.loads(zf.read(next(n for n in zf.namelist() if n.endswith("/_build_info.json"))))
    assert info["vendored"] == {LIB: {"found": "sm_90a;compute_90a", "expected": "sm_90a;compute_90a", "exempt": None}}
    buildinfo.validate(info)

    # the gate: passes with this recipe; refuses once the recipe expects other arches of it
    upload = ["upload", str(dist), "--root", str(root), "--target", "index", "--dry-run", "--json"]
    assert main(upload) == 0
    capsys.readouterr()
    _recipe(root, f"'libkern*': '{ARCH}'")
    assert main(upload) == 1
    refused = json.loads(capsys.readouterr().out)["gate"]["refused"]
    assert any(r["check"] == "config" and "libkern" in r["message"] for r in refused), refused

    # a wheel stamped without a record of its bundled library (an older farm's, or a forged
    # provenance): the gate refuses it, and the audit calls it wheel-wrong
    _recipe(root, "'libkern*': '9.0a+PTX'")
    old = tmp_path / "old"
    plain = json.loads(demo_batch.fragment.read_text())
    for key in ("filename", "sha256", "size", "published"):
        plain.pop(key)
    so = next(iter(plain["extensions"]))
    result = stamp_wheel(raw, old, local="cu130", build_tag=None,
                         build_info=lambda _r, hashes: BuildInfo.from_json({**plain, "extensions": {so: hashes[so]}}))
    assert result.build_info is not None
    write_fragment(result.build_info.ledger_entry(filename=result.filename, sha256=result.sha256, size=result.size),
                   old)
    assert main(["upload", str(old), "--root", str(root), "--target", "index", "--dry-run", "--json"]) == 1
    refused = json.loads(capsys.readouterr().out)["gate"]["refused"]
    assert any(r["check"] == "inspection" and "does not record" in r["message"] for r in refused), refused
    assert main(["audit", str(old), "--root", str(root), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    text = json.dumps(rows)
    assert "wheel-wrong" in text
    assert "never asserted" in text
