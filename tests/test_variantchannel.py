"""The wheel-variant channel of the static index: each asserted wheel again as a variant wheel
(its bytes, plus variant.json and RECORD), pages listing only variants and their versions'
variants.json, remade from files/ and the ledger at every regeneration."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from farm.errors import ConfigError, DefectError, ToolError
from farm.provenance.buildinfo import BUILD_INFO_NAME, LEDGER_KEYS, LedgerEntry
from farm.provenance.ledger import LedgerIndex
from farm.publish import index, variantchannel
from farm.publish.gate import Vouchers
from farm.publish.indexsettings import IndexSettings
from farm.publish.indextarget import _variant_verdicts
from farm.publish.publish import upload
from farm.publish.verdict import Verdict
from tests.support.ledgermaker import make_entry
from tests.support.postbuildfix import Batch, build_stamped
from tests.support.publishfix import copy_batch, fresh_venv, pip_install, pypiserver, serve_dir
from tests.support.wheelmaker import make_wheel

Ledger = dict[str, str]  # file name -> sha256


def _wheel(out: Path, dist: str, found: str, *, torch: str = "none", provenance: str = "asserted",
           python: str = "cp311") -> Path:
    local = "cu130" + ("" if torch == "none" else f"torch{torch}")
    entry = make_entry(dist, "1.0", cuda="13.0", torch=torch, arch=found, provenance=provenance, python=python)
    info = {k: v for k, v in entry.items() if k not in LEDGER_KEYS}
    info["found"] = {f"{dist}/_C.so": found}
    info["toolchain"] = None if provenance == "inferred" else {**info["toolchain"], "nvcc": "13.0.88"}
    return make_wheel(out, dist, f"1.0+{local}", {
        f"{dist}/__init__.py": b"",
        f"{dist}/_C.so": b"\x7fELF not really" * 100,
        f"{dist}-1.0+{local}.dist-info/{BUILD_INFO_NAME}": json.dumps(info).encode(),
    }, tag=f"{python}-{python}-linux_x86_64")


def _tree(tmp_path: Path, wheels: list[Path]) -> tuple[Path, Ledger]:
    root = tmp_path / "index"
    ledger = {w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels}
    assert index.publish_each(root, [(w, ledger[w.name]) for w in wheels], ledger.get).report is not None
    return root, ledger


def _links(page: Path) -> list[str]:
    return re.findall(r'href="([^"#]*)#sha256=', page.read_text())


def test_layout_pages_and_the_versions_json(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_80;sm_90;compute_90")
    b = _wheel(tmp_path / "w", "alpha", "sm_90", python="cp312")
    c = _wheel(tmp_path / "w", "beta", "sm_80;sm_90", torch="2.9")
    root, ledger = _tree(tmp_path, [a, b, c])
    report = variantchannel.regenerate(root, ledger.get)

    assert report.left_out == ()
    assert report.channels == ("cu130", "cu130/torch2.9")
    va, vb = report.made[a.name], report.made[b.name]
    assert va.props.sm_arch == ("80_real", "90_real", "100_virtual", "110_virtual", "120_virtual")
    assert vb.props.sm_arch == ("90_real",)
    assert va.filename == f"{a.name.removesuffix('.whl')}-{va.label}.whl"
    assert re.fullmatch(r"[0-9a-f]{8}", va.label)
    assert va.label != vb.label
    out = root / "variants"
    # the torch-free project is listed in its CUDA line's torch channel too, as in the PEP 503 tree
    assert sorted(str(p.relative_to(out)) for p in out.rglob("index.html")) == [
        "cu130/alpha/index.html", "cu130/index.html", "cu130/torch2.9/alpha/index.html",
        "cu130/torch2.9/beta/index.html", "cu130/torch2.9/index.html"]
    links = _links(out / "cu130/alpha/index.html")
    assert links == ["../../files/" + va.filename.replace("+", "%2B"), "../../files/" + vb.filename.replace("+", "%2B"),
                     "../../files/alpha-1.0%2Bcu130-variants.json"]
    page = (out / "cu130/alpha/index.html").read_text()
    meta_sha = hashlib.sha256((out / "files" / f"{va.filename}.metadata").read_bytes()).hexdigest()
    assert f'data-core-metadata="sha256={meta_sha}"' in page
    doc = json.loads((out / "files/alpha-1.0+cu130-variants.json").read_bytes())
    assert doc["$schema"] == variantchannel.SCHEMA
    assert doc["default-priorities"] == {"namespace": ["nvidia"]}
    assert doc["providers"] == {"nvidia": {"requires": ["nvidia-variant-provider"],
                                           "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin"}}
    assert doc["variants"] == {
        va.label: {"nvidia": {"cuda_version_lower_bound": ["13.0"],
                              "sm_arch": ["100_virtual", "110_virtual", "120_virtual", "80_real", "90_real"]}},
        vb.label: {"nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["90_real"]}}}
    listed = json.loads((out / "packages.json").read_text())
    assert listed["channels"]["cu130"] == {"alpha": sorted([va.filename, vb.filename])}
    # the PEP 503 tree does not know the channel
    assert "variants" not in (root / "index.html").read_text()


def test_a_variant_wheel_is_its_wheel_plus_variant_json(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_80;sm_90")
    root, ledger = _tree(tmp_path, [a])
    v = variantchannel.regenerate(root, ledger.get).made[a.name]
    path = root / "variants/files" / v.filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == v.sha256
    with zipfile.ZipFile(a) as base, zipfile.ZipFile(path) as var:
        names = var.namelist()
        assert names[-2:] == ["alpha-1.0+cu130.dist-info/variant.json", "alpha-1.0+cu130.dist-info/RECORD"]
        assert [n for n in base.namelist() if not n.endswith("/RECORD")] == names[:-2]
        for name in names[:-2]:  # the same compressed bytes, not re-compressed
            b, w = base.getinfo(name), var.getinfo(name)
            assert (b.CRC, b.compress_size, b.compress_type) == (w.CRC, w.compress_size, w.compress_type)
        assert json.loads(var.read(names[-2])) == json.loads(v.dist_info)
        rows = [line.split(",") for line in var.read(names[-1]).decode().splitlines()]
        for name, digest, size in rows:
            if name.endswith("/RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = var.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, size) == (want, str(len(data)))
        assert sorted(r[0] for r in rows) == sorted(names)


def test_remade_every_time_and_never_believed(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_80;sm_90")
    root, ledger = _tree(tmp_path, [a])
    first = variantchannel.regenerate(root, ledger.get)
    again = variantchannel.regenerate(root, ledger.get)
    assert (again.written, again.removed) == ((), ())  # the same bytes: nothing rewritten
    path = root / "variants/files" / first.made[a.name].filename
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # edited in the tree
    path.write_bytes(bytes(data))
    (root / "variants/files/stray.whl").write_bytes(b"x")
    fixed = variantchannel.regenerate(root, ledger.get)
    assert f"files/{path.name}" in fixed.written
    assert "files/stray.whl" in fixed.removed
    assert hashlib.sha256(path.read_bytes()).hexdigest() == first.made[a.name].sha256


def test_wheels_without_a_variant_are_named(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_90a")
    b = _wheel(tmp_path / "w", "beta", "sm_80", provenance="inferred")
    c = _wheel(tmp_path / "w", "gamma", "sm_80")
    root, ledger = _tree(tmp_path, [a, b, c])
    report = variantchannel.regenerate(root, ledger.get)
    assert dict(report.left_out) == {
        a.name: "no sm_arch value of NVIDIA's provider names only GPUs its targets (sm_90a) run on",
        b.name: "not an asserted wheel"}
    assert list(report.made) == [c.name]


def test_a_lost_project_is_refused_unless_allowed(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_80")
    c = _wheel(tmp_path / "w", "gamma", "sm_80")
    root, ledger = _tree(tmp_path, [a, c])
    v = variantchannel.regenerate(root, ledger.get).made[a.name]
    (root / "files" / a.name).unlink()
    with pytest.raises(DefectError, match="no longer list 1 project page.*cu130/alpha"):
        variantchannel.regenerate(root, ledger.get)
    assert (root / "variants/files" / v.filename).exists()  # nothing changed
    report = variantchannel.regenerate(root, ledger.get, allow_drop=["alpha"])
    assert f"files/{v.filename}" in report.removed
    assert not (root / "variants/cu130/alpha").exists()


def test_a_wheel_the_ledger_does_not_vouch_for_stops_it(tmp_path: Path) -> None:
    a = _wheel(tmp_path / "w", "alpha", "sm_80")
    root, _ = _tree(tmp_path, [a])
    with pytest.raises(DefectError, match="the ledger records"):
        variantchannel.regenerate(root, lambda name: "0" * 64)
    assert not (root / "variants").exists()


def test_settings(tmp_path: Path) -> None:
    def parse(**options: Any) -> IndexSettings:
        return IndexSettings.parse("index", {"path": "public/index", **options}, root=tmp_path, where="t")

    assert parse().variants is False
    assert parse(variants=True).variants is True
    with pytest.raises(ConfigError, match="variants must be true or false"):
        parse(variants="yes")
    with pytest.raises(ConfigError, match="variants needs the wheels stored in the tree"):
        parse(variants=True, links="github")


def test_without_the_reference_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "variantlib", None)  # import variantlib raises ImportError
    with pytest.raises(ToolError, match="needs variantlib") as caught:
        variantchannel.regenerate(tmp_path, lambda name: None)
    assert caught.value.exit_code == 3
    assert "upload" in (caught.value.hint or "")


# -- uv 0.13.9 against the channel served on 127.0.0.1, with wheels of the real farm path --------
INSTALLED = (
    "import importlib.metadata as m, json\n"
    "d = m.distribution('demo_ext')\n"
    "info = json.loads(d.read_text('_build_info.json'))\n"
    "print(json.dumps({'found': sorted(info['found'].values()), 'epoch': info['build_epoch'],"
    " 'variant': json.loads(d.read_text('variant.json') or 'null')}))\n"
)


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory, cuda_home: Path) -> tuple[Batch, Batch]:
    """demo_ext built, asserted and stamped twice for one cell: sm_90 SASS alone (epoch 0), then
    sm_80 SASS with compute_80 PTX (epoch 1, so another file name)."""
    base = tmp_path_factory.getbasetemp()
    return (build_stamped(base / "demo-ext-sm90", cuda_home, "9.0"),
            build_stamped(base / "demo-ext-sm80-ptx", cuda_home, "8.0+PTX", build_epoch=1))


def _uv(python: Path, *indexes: str, sm: str | None, driver: str | None,
        preview: bool = True) -> subprocess.CompletedProcess[str]:
    """uv installing demo_ext from ``indexes`` into ``python``'s environment as on a machine whose
    GPU and driver NVIDIA's provider detects as ``sm`` and ``driver`` (None: none detected)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NV_VARIANT_PROVIDER_", "UV_"))}
    env |= {"NV_VARIANT_PROVIDER_FORCE_SM_ARCH": sm} if sm else {}
    env |= {"NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": driver} if driver else {}
    uv = Path(sys.executable).with_name("uv")
    flags = ["--preview-features", "wheel-variants"] if preview else []
    return subprocess.run([str(uv), "pip", "install", "--no-config", "--no-cache", "--python", str(python), *flags,
                           *indexes, "--reinstall", "demo_ext"], capture_output=True, text=True, env=env, check=False)


def _installed(python: Path) -> dict[str, Any] | None:
    proc = subprocess.run([str(python), "-c", INSTALLED], capture_output=True, text=True, check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


@pytest.mark.slow
def test_uv_installs_the_variant_the_gpu_and_driver_run(two_builds: tuple[Batch, Batch], tmp_path: Path) -> None:
    sass, ptx = two_builds
    out = tmp_path / "out"
    for batch in two_builds:
        copy_batch(batch, out)
    target = IndexSettings("index", tmp_path / "index", variants=True)
    report = upload(out, [target], ledger=tmp_path / "ledger.jsonl")
    assert report.ok, [v.line() for v in report.verdicts]
    made = {v.wheel: v for v in report.verdicts if v.target == "index/variants"}
    assert set(made) == {sass.wheel.name, ptx.wheel.name}
    assert "sm_arch 90_real; a driver of CUDA 13.0 or newer" in made[sass.wheel.name].message
    assert "sm_arch 80_real, 90_virtual, 100_virtual, 110_virtual, 120_virtual;" in made[ptx.wheel.name].message

    # a decoy of the same name on the index after it (PyPI's place): never taken for a GPU the
    # farm's variants do not serve, since uv takes a project from the first index that has it
    decoys = tmp_path / "decoys"
    make_wheel(decoys, "demo_ext", "9.9", {"demo_ext/__init__.py": b""}, tag="py3-none-any")
    decoy, decoy_base = pypiserver(decoys, tmp_path / "pypiserver.log")
    server, base = serve_dir(target.path, tmp_path / "http.log")
    try:
        channel = ("--index", f"{base}/variants/cu130/", "--default-index", f"{decoy_base}/simple/")
        python = fresh_venv(tmp_path / "venv")
        # an H100 (9.0): both variants fit (sm_90 SASS, compute_80 PTX); the SASS one is preferred
        proc = _uv(python, *channel, sm="9.0", driver="13.0")
        assert proc.returncode == 0, proc.stderr
        got = _installed(python)
        assert got is not None
        assert (got["found"], got["epoch"]) == (["sm_90"], 0)
        assert list(got["variant"]["variants"]) == [str(made[sass.wheel.name].url).rsplit("-", 1)[1][:-4]]
        # an RTX 5090 (12.0): only the PTX of the second build runs there
        proc = _uv(python, *channel, sm="12.0", driver="13.0")
        assert proc.returncode == 0, proc.stderr
        got = _installed(python)
        assert got is not None
        assert (got["found"], got["epoch"]) == (["sm_80;compute_80"], 1)
        # a T4 (7.5), a driver below CUDA 13.0's, no driver, no GPU: no variant runs there; a
        # refusal, nothing installed
        for sm, driver in (("7.5", "13.0"), ("9.0", "12.8"), ("9.0", None), (None, "13.0")):
            fresh = fresh_venv(tmp_path / f"venv-{sm}-{driver}")
            proc = _uv(fresh, *channel, sm=sm, driver=driver)
            assert proc.returncode != 0, (sm, driver, proc.stdout)
            assert "has only unsupported wheel variants" in proc.stderr, (sm, driver, proc.stderr)
            assert _installed(fresh) is None
        # without the preview feature uv sees no wheel it may install in the channel
        fresh = fresh_venv(tmp_path / "venv-no-preview")
        proc = _uv(fresh, *channel, sm="9.0", driver="13.0", preview=False)
        assert proc.returncode != 0, proc.stdout
        assert _installed(fresh) is None
        # pip does not read variants: the variant channel offers it nothing, the ordinary one the
        # newest build (the higher build tag)
        proc = pip_install(fresh, "--index-url", f"{base}/variants/cu130/", "demo_ext")
        assert proc.returncode != 0, proc.stdout
        assert "No matching distribution" in proc.stderr, proc.stderr
        proc = pip_install(fresh, "--index-url", f"{base}/cu130/", "demo_ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = _installed(fresh)
        assert got is not None
        assert (got["found"], got["epoch"], got["variant"]) == (["sm_80;compute_80"], 1, None)
    finally:
        server.stop()
        decoy.stop()


def test_what_the_tree_holds_is_never_read_through(tmp_path: Path) -> None:
    """A variant file replaced by a link (to a FIFO that would block a reader, or to a file
    elsewhere) is replaced, not read; a channel folder that is a link is refused."""
    a = _wheel(tmp_path / "w", "alpha", "sm_80")
    root, ledger = _tree(tmp_path, [a])
    v = variantchannel.regenerate(root, ledger.get).made[a.name]
    path = root / "variants/files" / v.filename
    outside = tmp_path / "outside"
    outside.write_bytes(path.read_bytes())
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (fifo, outside):
        path.unlink()
        path.symlink_to(target)
        assert f"files/{v.filename}" in variantchannel.regenerate(root, ledger.get).written
        assert not path.is_symlink()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == v.sha256
    files = root / "variants/files"
    files.rename(tmp_path / "elsewhere")
    files.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DefectError, match="variants/files is a symbolic link"):
        variantchannel.regenerate(root, ledger.get)


def test_a_channel_that_cannot_be_made_fails_the_new_wheels_there(tmp_path: Path) -> None:
    """The upload's step after the tree took its wheels: a channel that cannot be made is a
    `failed` verdict per new wheel on `<target>/variants` (exit 3), the wheels' own verdicts stand."""
    a = _wheel(tmp_path / "w", "alpha", "sm_80")
    root, _ = _tree(tmp_path, [a])
    target = IndexSettings("index", root, variants=True)
    verdicts, warnings = _variant_verdicts(target, [a.name], Vouchers.load(None, []))  # the ledger vouches for nothing
    (v,) = verdicts
    assert (v.wheel, v.target, v.verdict) == (a.name, "index/variants", Verdict.FAILED)
    assert "the wheel-variant channel was not made: files/alpha" in v.message
    assert warnings == ()
    b = _wheel(tmp_path / "w", "beta", "sm_90a")
    root, ledger = _tree(tmp_path / "two", [a, b])
    fragments = {sha: LedgerEntry.from_json(make_entry(name.split("-")[0], "1.0", cuda="13.0", torch="none",
                                                       filename=name, sha256=sha)) for name, sha in ledger.items()}
    good, warnings = _variant_verdicts(IndexSettings("index", root, variants=True), [a.name, b.name],
                                       Vouchers(LedgerIndex.empty(), fragments))
    assert [(v.wheel, v.verdict) for v in good] == [(a.name, Verdict.PUBLISHED)]
    assert good[0].url is not None
    assert good[0].url.startswith("variants/files/alpha-1.0%2Bcu130-cp311-cp311-linux_x86_64-")
    why = "no sm_arch value of NVIDIA's provider names only GPUs its targets (sm_90a) run on"
    assert warnings == (f"{b.name}: no wheel variant: {why}",)
