"""The static PEP 503 tree: layout, links, PEP 658 metadata, packages.json, regeneration from
the ledger, and the refusals (lost project, same name with another hash, unledgered file)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from farm.errors import DefectError, LedgerError
from farm.provenance.buildinfo import LedgerEntry, inferred_build_info
from farm.provenance.stamp import stamp_wheel
from farm.publish import index
from tests.support.ledgermaker import make_entry
from tests.support.wheelmaker import make_wheel

Built = tuple[list[Path], dict[str, LedgerEntry]]

WHEELS = [  # (dist, version, cuda, torch)
    ("alpha", "1.0", "12.8", "2.8"),
    ("alpha", "1.0", "12.8", "2.7"),
    ("Beta_Pkg", "2.0", "12.8", "none"),
    ("gamma", "1.0", "13.0", "2.9"),
]


def _local(cuda: str, torch: str) -> str:
    return f"cu{cuda.replace('.', '')}" + ("" if torch == "none" else f"torch{torch}")


@pytest.fixture
def built(tmp_path: Path) -> Built:
    wheels, entries = [], {}
    for dist, version, cuda, torch in WHEELS:
        path = make_wheel(tmp_path / "wheels", dist, f"{version}+{_local(cuda, torch)}",
                          {f"{dist.lower()}/__init__.py": f"# {cuda} {torch}\n".encode()})
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        entries[path.name] = LedgerEntry.from_json(make_entry(dist, version, cuda=cuda, torch=torch,
                                                              filename=path.name, sha256=sha))
        wheels.append(path)
    return wheels, entries


def _sha(entries: dict[str, LedgerEntry]) -> index.EntryLookup:
    """The index asks the ledger one thing of a file name: the sha256 it records."""
    return lambda name: entries[name].sha256 if name in entries else None


def _publish(root: Path, wheels: list[Path], entries: dict[str, LedgerEntry]) -> index.IndexReport:
    pairs = [(w, hashlib.sha256(w.read_bytes()).hexdigest()) for w in wheels]
    batch = index.publish_each(root, pairs, _sha(entries))
    assert batch.report is not None
    assert not batch.refused
    assert {u.action for u in batch.uploads} == {"stored"}
    return batch.report


def _links(page: Path) -> list[dict[str, str]]:
    out = []
    for m in re.finditer(r"<a ([^>]*)>([^<]*)</a>", page.read_text()):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))
        out.append({**attrs, "text": m.group(2)})
    return out


def test_layout_channels_and_links(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    report = _publish(root, wheels, entries)
    assert report.channels == ("cu128", "cu128/torch2.7", "cu128/torch2.8", "cu130/torch2.9")

    pages = sorted(str(p.relative_to(root)) for p in root.rglob("index.html"))
    assert pages == sorted([
        "index.html", "flat/index.html",
        "cu128/index.html", "cu128/beta-pkg/index.html",
        "cu128/torch2.7/index.html", "cu128/torch2.7/alpha/index.html", "cu128/torch2.7/beta-pkg/index.html",
        "cu128/torch2.8/index.html", "cu128/torch2.8/alpha/index.html", "cu128/torch2.8/beta-pkg/index.html",
        "cu130/torch2.9/index.html", "cu130/torch2.9/gamma/index.html",
    ])
    # One torch variant per page: pip must not choose between +cu128torch2.7 and 2.8 by label.
    (link,) = _links(root / "cu128/torch2.7/alpha/index.html")
    assert link["text"] == "alpha-1.0+cu128torch2.7-cp311-cp311-linux_x86_64.whl"
    assert [link["href"] for link in _links(root / "cu128/torch2.7/index.html")] == ["alpha/", "beta-pkg/"]

    for page in root.rglob("*/index.html"):
        for link in _links(page):
            if not link["href"].endswith("/"):
                target, sha = link["href"].split("#sha256=")
                file = (page.parent / target.replace("%2B", "+")).resolve()
                assert hashlib.sha256(file.read_bytes()).hexdigest() == sha
                meta = file.with_name(file.name + ".metadata").read_bytes()
                meta_sha = hashlib.sha256(meta).hexdigest()
                assert link["data-dist-info-metadata"] == link["data-core-metadata"] == f"sha256={meta_sha}"
                with zipfile.ZipFile(file) as zf:
                    (member,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
                    assert zf.read(member) == meta
    assert len(_links(root / "flat/index.html")) == len(WHEELS)


def test_packages_json(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    doc = json.loads((root / "packages.json").read_text())
    assert doc["channels"]["cu128"] == {"beta-pkg": ["Beta_Pkg-2.0+cu128-cp311-cp311-linux_x86_64.whl"]}
    assert set(doc["channels"]["cu128/torch2.8"]) == {"alpha", "beta-pkg"}
    f = doc["files"]["gamma-1.0+cu130torch2.9-cp311-cp311-linux_x86_64.whl"]
    assert f["project"] == "gamma"
    assert f["cuda_label"] == "cu130"
    assert f["torch_label"] == "torch2.9"
    assert f["sha256"] == entries["gamma-1.0+cu130torch2.9-cp311-cp311-linux_x86_64.whl"].sha256
    assert f["url"] == "files/gamma-1.0%2Bcu130torch2.9-cp311-cp311-linux_x86_64.whl"


def test_regeneration_is_idempotent_and_restores_pages(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert index.regenerate(root, _sha(entries)).written == ()
    (root / "cu128/torch2.8/alpha/index.html").unlink()
    (root / "index.html").write_text("vandalised")
    report = index.regenerate(root, _sha(entries))
    assert sorted(report.written) == ["cu128/torch2.8/alpha/index.html", "index.html"]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot


def test_lost_project_refused_unless_allowed(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    before = (root / "packages.json").read_bytes()
    (root / "files" / "gamma-1.0+cu130torch2.9-cp311-cp311-linux_x86_64.whl").unlink()
    with pytest.raises(DefectError) as exc:
        index.regenerate(root, _sha(entries))
    assert "cu130/torch2.9/gamma" in str(exc.value)
    assert "--allow-drop" in str(exc.value)
    assert (root / "packages.json").read_bytes() == before
    assert (root / "cu130/torch2.9/gamma/index.html").exists()

    report = index.regenerate(root, _sha(entries), allow_drop=["Gamma"])
    assert report.removed == ("cu130/torch2.9/gamma", "cu130/torch2.9/")
    assert "cu130/torch2.9" not in json.loads((root / "packages.json").read_text())["channels"]
    assert not (root / "cu130").exists()  # no page of the dropped channel is left behind
    assert [link["href"] for link in _links(root / "index.html")] == [
        "cu128/", "cu128/torch2.7/", "cu128/torch2.8/", "compat/find.html"]  # the channels, then the find page


def test_same_name_other_hash_refused_and_reupload_is_a_noop(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    pairs = [(w, hashlib.sha256(w.read_bytes()).hexdigest()) for w in wheels]
    assert {u.action for u in index.publish_each(root, pairs, _sha(entries)).uploads} == {"present"}
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot

    rebuilt = make_wheel(tmp_path / "rebuilt", "alpha", "1.0+cu128torch2.8", {"alpha/__init__.py": b"# other\n"})
    assert rebuilt.name == wheels[0].name
    batch = index.publish_each(root, [(rebuilt, hashlib.sha256(rebuilt.read_bytes()).hexdigest())], _sha(entries))
    assert [name for name, _ in batch.refused] == [rebuilt.name]
    assert "the index holds sha256" in batch.refused[0][1]
    assert batch.report is None
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot


def test_wheel_changed_after_the_gate_is_not_stored(built: Built, tmp_path: Path) -> None:
    """The sha256 the gate checked is checked again while copying: other bytes are never stored."""
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels[:1], entries)
    snapshot = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    checked = hashlib.sha256(wheels[1].read_bytes()).hexdigest()
    with wheels[1].open("ab") as fh:
        fh.write(b"\0")  # the file changes between the gate and the copy
    with pytest.raises(DefectError, match=f"changed after the gate checked it: sha256 [0-9a-f]{{64}}, not {checked}"):
        index.publish_each(root, [(wheels[1], checked)], _sha(entries))
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot


def test_stored_file_must_match_the_ledger(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    name = wheels[0].name
    with pytest.raises(LedgerError, match="not in the ledger"):
        index.regenerate(root, _sha({k: v for k, v in entries.items() if k != name}))
    (root / "files" / name).write_bytes(b"tampered")
    with pytest.raises(DefectError, match="the stored file changed"):
        index.regenerate(root, _sha(entries))


def test_pip_resolves_within_a_channel(built: Built, tmp_path: Path) -> None:
    """pip, given the torch2.7 channel, downloads the torch2.7 build (not the higher label)."""
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels, entries)
    dest = tmp_path / "dl"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check",
         "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
         "--platform", "linux_x86_64", "--index-url", (root / "cu128" / "torch2.7").as_uri() + "/",
         "-d", str(dest), "alpha", "beta-pkg"],
        capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in dest.iterdir()) == [
        "Beta_Pkg-2.0+cu128-cp311-cp311-linux_x86_64.whl",
        "alpha-1.0+cu128torch2.7-cp311-cp311-linux_x86_64.whl",
    ]


def test_pip_and_uv_install_the_highest_build_tag(tmp_path: Path) -> None:
    """A rebuild at a higher build_epoch beside the old one, in one channel: both installers take
    the rebuild (the reason farm names rebuilds with a build tag)."""
    raw = make_wheel(tmp_path / "raw", "alpha", "1.0", {"alpha/__init__.py": b""}, tag="py3-none-any")
    entries = {}
    for epoch in (1, 2):
        stamped = stamp_wheel(raw, tmp_path / "out", local="cu128torch2.8", build_tag=str(epoch),
                              build_info=inferred_build_info(dist="alpha", version="1.0", cell={}, found={},
                                                             extensions={"alpha/e.so": f"{epoch:064x}"}))
        entries[stamped.filename] = LedgerEntry.from_json(make_entry("alpha", "1.0", build_epoch=epoch,
                                                                     filename=stamped.filename, sha256=stamped.sha256))
    root = tmp_path / "index"
    _publish(root, sorted((tmp_path / "out").glob("*.whl")), entries)
    url = (root / "cu128" / "torch2.8").as_uri() + "/"
    pip = subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--no-deps", "--no-cache-dir",
                          "--disable-pip-version-check", "--target", str(tmp_path / "pip"), "--index-url", url,
                          "alpha"], capture_output=True, text=True, check=False)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    uv = subprocess.run([str(Path(sys.executable).with_name("uv")), "pip", "install", "--no-config", "--no-cache",
                         "--python", sys.executable, "--target", str(tmp_path / "uv"), "--index-url", url, "alpha"],
                        capture_output=True, text=True, check=False)
    assert uv.returncode == 0, uv.stdout + uv.stderr
    for installer in ("pip", "uv"):
        info = tmp_path / installer / "alpha-1.0+cu128torch2.8.dist-info" / "_build_info.json"
        assert json.loads(info.read_text())["extensions"] == {"alpha/e.so": f"{2:064x}"}, installer


def test_describe_reads_requires_python() -> None:
    meta = b"Metadata-Version: 2.1\nName: x\nVersion: 1.0+cu128\nRequires-Python: >=3.9\n"
    f = index.describe("x-1.0+cu128-cp311-cp311-linux_x86_64.whl", "0" * 64, 10, meta)
    assert f.requires_python == ">=3.9"
    assert f.home == "cu128"
    assert f.torch_label is None
    assert 'data-requires-python="&gt;=3.9"' in index.file_link(f, "../../")
    odd = index.describe("x-1.0-py3-none-any.whl", "0" * 64, 10, None)
    assert odd.home is None
    assert odd.metadata_sha256 is None
    assert "data-core-metadata" not in index.file_link(odd, "../")


def test_dry_run_writes_nothing(built: Built, tmp_path: Path) -> None:
    wheels, entries = built
    root = tmp_path / "index"
    pairs = [(w, hashlib.sha256(w.read_bytes()).hexdigest()) for w in wheels]
    batch = index.publish_each(root, pairs, _sha(entries), dry_run=True)
    assert batch.report is None
    assert {u.action for u in batch.uploads} == {"stored"}
    assert not root.exists()
    _publish(root, wheels, entries)
    (root / "index.html").unlink()
    batch = index.publish_each(root, pairs, _sha(entries), dry_run=True)
    assert batch.report is None
    assert {u.action for u in batch.uploads} == {"present"}
    assert not (root / "index.html").exists()


def test_publish_each_refuses_one_wheel_and_stores_the_others(built: Built, tmp_path: Path) -> None:
    """Per wheel: another file under one wheel's name refuses that wheel alone; the others are
    stored and the tree regenerated once."""
    wheels, entries = built
    root = tmp_path / "index"
    _publish(root, wheels[:1], entries)
    rebuilt = make_wheel(tmp_path / "rebuilt", "alpha", "1.0+cu128torch2.8", {"alpha/__init__.py": b"# other\n"})
    assert rebuilt.name == wheels[0].name
    batch = [rebuilt, *wheels[1:]]
    done = index.publish_each(root, [(w, hashlib.sha256(w.read_bytes()).hexdigest()) for w in batch], _sha(entries))
    ((name, why),) = done.refused
    assert name == rebuilt.name
    assert why.startswith(f"{rebuilt.name}: the index holds sha256 {entries[rebuilt.name].sha256}")
    assert sorted(u.filename for u in done.uploads) == sorted(w.name for w in wheels[1:])
    assert {u.action for u in done.uploads} == {"stored"}
    assert done.report is not None
    assert done.report.files == len(wheels)
    assert (root / "files" / wheels[0].name).read_bytes() == wheels[0].read_bytes()  # never replaced
