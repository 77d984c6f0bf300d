"""The upload gate on real stamped wheels (demo_ext built with nvcc, postbuild's output) and on
the pure decision function."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from farm.binary.archrule import Expected
from farm.binary.cuobjdump import PINNED, cuobjdump_version
from farm.binary.madeby import MadeBy
from farm.cli import main
from farm.errors import ToolError
from farm.model.arch import ArchList
from farm.provenance import buildinfo
from farm.provenance.buildinfo import Assertion, BuildInfo, LedgerEntry, decode_list, name_problems, split_variant_label
from farm.provenance.judge import Check, Derived, found_difference
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import merge_fragments, write_fragment
from farm.provenance.stamp import stamp_wheel
from farm.provenance.wheelfacts import WheelFacts
from farm.publish.gate import GateReaders, GateResult, Refusal, Vouchers, refusals, run_gate
from farm.publish.indexsettings import IndexSettings
from farm.publish.publish import upload
from farm.publish.verdict import Verdict
from tests.support.fatbinmaker import noted_extension, ptx, sass
from tests.support.ledgermaker import make_entry
from tests.support.postbuildfix import Batch
from tests.support.publishfix import copy_batch, write_farm_root
from tests.support.wheelmaker import make_wheel, stamped_wheel


def _gate(out: Path, ledger: Path | None = None) -> GateResult:
    return run_gate(sorted(out.glob("*.whl")), Vouchers.load(ledger, [out]))


def _checks(result) -> dict[str, set[Check]]:
    out: dict[str, set[Check]] = {}
    for r in result.refused:
        out.setdefault(r.wheel, set()).add(r.check)
    return out


def test_stamped_wheel_with_fragment_passes(demo_batch: Batch, tmp_path: Path) -> None:
    wheel = copy_batch(demo_batch, tmp_path)
    result = _gate(tmp_path)
    assert result.ok, result.lines()
    (passed,) = result.passed
    assert passed.filename == wheel.name
    assert passed.entry_source == "fragment"
    assert passed.sha256 == buildinfo.sha256_file(wheel)


def _restamp(batch: Batch, dest: Path, **changes: object) -> Path:
    """Another stamped wheel of the same build, with its fragment (e.g. another build_epoch)."""
    info = json.loads(batch.fragment.read_text())
    for key in ("filename", "sha256", "size", "published"):
        info.pop(key)
    info.update(changes)
    epoch = int(info["build_epoch"])
    stamped = stamp_wheel(batch.raw, dest, local="cu130", build_tag=str(epoch) if epoch else None,
                          build_info=BuildInfo.from_json(info))
    write_fragment({**info, "filename": stamped.filename, "sha256": stamped.sha256, "size": stamped.size,
                    "published": []}, dest)
    return stamped.path


def test_byte_flipped_after_postbuild_refuses_that_wheel_only(demo_batch: Batch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    good = _restamp(demo_batch, out, build_epoch=1)  # a sound wheel in the same batch
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    wheel.write_bytes(bytes(data))

    result = _gate(out)
    assert not result.ok
    assert set(_checks(result)) == {wheel.name}
    checks = _checks(result)[wheel.name]
    assert Check.LEDGER in checks or Check.READABLE in checks
    assert any("changed after postbuild" in r.message or "cannot read" in r.message for r in result.refused)
    assert [w.filename for w in result.passed] == [good.name]

    index = IndexSettings("index", tmp_path / "index")
    report = upload(out, [index], ledger=tmp_path / "ledger.jsonl")
    assert not report.ok
    assert report.exit_code == 1
    verdicts = {(v.wheel, v.target): v.verdict for v in report.verdicts}
    assert verdicts == {(wheel.name, "gate"): Verdict.REFUSED, (good.name, "index"): Verdict.PUBLISHED}
    # the sound wheel is published and recorded; the flipped one is nowhere
    assert sorted(p.name for p in (index.path / "files").glob("*.whl")) == [good.name]
    assert [r.filename for r in LedgerIndex.load(tmp_path / "ledger.jsonl").records] == [good.name]


def test_rebuild_under_a_name_the_ledger_holds_is_refused_even_with_its_fragment(demo_batch: Batch,
                                                                                  tmp_path: Path) -> None:
    """The first build is in the ledger; a second build of the same cell and epoch (another
    recipe hash, so other bytes) comes with its own fragment. The name is taken: refused before
    any target is asked."""
    ledger = tmp_path / "ledger.jsonl"
    first = tmp_path / "first"
    copy_batch(demo_batch, first)
    merge_fragments(ledger, first)
    out = tmp_path / "out"
    rebuilt = _restamp(demo_batch, out, recipe_sha256="c" * 64)
    assert rebuilt.name == demo_batch.wheel.name
    (refusal,) = _gate(out, ledger).refused
    assert refusal.check is Check.LEDGER
    assert refusal.message == (f"the ledger already records {rebuilt.name} with sha256 "
                               f"{buildinfo.sha256_file(demo_batch.wheel)}; this file "
                               f"({buildinfo.sha256_file(rebuilt)}) is another build under the same name")


def test_unstamped_wheel_refused(demo_batch: Batch, tmp_path: Path) -> None:
    shutil.copy2(demo_batch.raw, tmp_path)
    result = _gate(tmp_path)
    (refusal,) = result.refused
    assert refusal.check is Check.STAMPED
    assert "farm postbuild" in refusal.fix


def test_stamped_wheel_without_ledger_entry_refused(demo_batch: Batch, tmp_path: Path) -> None:
    wheel = copy_batch(demo_batch, tmp_path, fragment=False)
    result = _gate(tmp_path, tmp_path / "ledger.jsonl")
    (refusal,) = result.refused
    assert refusal.check is Check.LEDGER
    assert refusal.wheel == wheel.name
    assert "no ledger entry or fragment has sha256" in refusal.message


def test_wheel_renamed_to_another_cell_refused(demo_batch: Batch, tmp_path: Path) -> None:
    wheel = copy_batch(demo_batch, tmp_path)
    other = wheel.with_name(wheel.name.replace("+cu130", "+cu128"))
    wheel.rename(other)
    result = _gate(tmp_path)
    checks = _checks(result)[other.name]
    assert Check.NAME in checks  # the label says cu128, the provenance says 13.0
    assert Check.LEDGER in checks  # the sha256 is recorded under the other name
    assert any("local label cu128 but the cell is cu130" in r.message for r in result.refused)


def test_extension_swapped_for_one_with_the_same_targets_is_refused(demo_batch: Batch, tmp_path: Path) -> None:
    """The .so is replaced after postbuild by other code with the same targets, and the fragment
    is rewritten for the new bytes: the extension's recorded sha256 still gives it away."""
    wheel = copy_batch(demo_batch, tmp_path, fragment=False)
    entry = json.loads(demo_batch.fragment.read_text())
    (so,) = entry["extensions"]
    swapped = tmp_path / "swapped.zip"
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(swapped, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info) + (b"\0" * 64 if info.filename == so else b""))
    swapped.replace(wheel)
    write_fragment({**entry, "sha256": buildinfo.sha256_file(wheel), "size": wheel.stat().st_size}, tmp_path)
    (refusal,) = _gate(tmp_path).refused
    assert refusal.check is Check.INSPECTION
    assert refusal.message == f"extension(s) differ from the sha256 recorded at postbuild: {so}"


def test_reinspection_differs_from_recorded_targets(demo_batch: Batch, tmp_path: Path) -> None:
    """A stamp whose recorded targets are not what the binary holds (sm_90 claimed, sm_80 built)."""
    info = json.loads(demo_batch.fragment.read_text())
    so = next(iter(info["found"]))
    _restamp(demo_batch, tmp_path, found={so: "sm_90"}, expected={so: "sm_90"},
             arch_list={"requested": "9.0", "normalised": "sm_90"})
    result = _gate(tmp_path)
    (refusal,) = result.refused
    assert refusal.check is Check.INSPECTION
    assert f"{so}: missing sm_90, extra sm_80" in refusal.message


def test_cli_refusal_lines_and_exit_code(demo_batch: Batch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = write_farm_root(tmp_path / "farm")
    out = tmp_path / "out"
    copy_batch(demo_batch, out, fragment=False)
    shutil.copy2(demo_batch.raw, out)
    rc = main(["upload", str(out), "--root", str(root), "--target", "index"])
    err = capsys.readouterr().err
    assert rc == 1
    lines = err.strip().splitlines()
    assert lines[0].startswith("gate: 0 wheel(s) passed, 2 problem(s)")
    assert any(line.startswith(f"{demo_batch.raw.name}: stamped:") for line in lines)
    assert any(line.startswith(f"{demo_batch.wheel.name}: ledger:") for line in lines)
    assert not (root / "public").exists()

    rc = main(["upload", str(out), "--root", str(root), "--target", "index", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert doc["ok"] is False
    assert {r["check"] for r in doc["gate"]["refused"]} == {"stamped", "ledger"}


def test_cli_upload_and_index_regeneration(demo_batch: Batch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = write_farm_root(tmp_path / "farm")
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    assert main(["upload", str(out), "--root", str(root)]) == 0  # default_target: index
    text = capsys.readouterr().out
    assert "index (index): sent 1" in text
    # the repository's _defaults.yml has the index's wheel-variant channel on
    assert f"{wheel.name}: index/variants: published variants/files/" in text
    assert "sm_arch 80_real; a driver of CUDA 13.0 or newer" in text
    tree = root / "public" / "index"
    assert (tree / "files" / wheel.name).exists()
    page = (tree / "cu130" / "demo-ext" / "index.html").read_bytes()
    (tree / "cu130" / "demo-ext" / "index.html").unlink()
    (tree / "variants" / "cu130" / "demo-ext" / "index.html").unlink()
    assert main(["index", str(tree), "--root", str(root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["written"] == ["cu130/demo-ext/index.html"]
    assert (tree / "cu130" / "demo-ext" / "index.html").read_bytes() == page
    assert doc["variants"]["written"] == ["cu130/demo-ext/index.html"]
    assert list(doc["variants"]["wheels"]) == [wheel.name]
    # the audit judges a variant wheel as any wheel: its binaries against its own provenance
    assert main(["audit", str(tree), "--root", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["wheels"]
    assert sorted((r["filename"] == wheel.name, r["verdict"]) for r in rows) == [(False, "ok"), (True, "ok")]


# -- the pure core ----------------------------------------------------------------------------
INFO: dict[str, Any] = {
    "schema_version": 1, "package": "demo_ext",
    "dist": "demo_ext", "version": "0.1.0", "build_epoch": 0, "provenance": "asserted",
    "cell": {"cuda": "12.8", "torch": "2.8", "python": "cp311", "platform": "linux_x86_64"},
    "assertion": {"result": "passed", "native_reader": "farm", "cuobjdump": None},
    "arch_list": {"requested": "8.0;9.0+PTX", "normalised": "sm_80;sm_90;compute_90"},
    "expected": {"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
    "found": {"demo_ext/_C.so": "sm_80;sm_90;compute_90"},
    "defaults_sha256": None, "recipe_sha256": None, "run": {"provider": "local", "repository": None, "commit": None,
                                                            "run_id": None, "attempt": None},
    "source": None, "toolchain": {"nvcc": None, "torch": None, "python": None, "builder": None, "cibuildwheel": None},
    "extensions": {"demo_ext/_C.so": "b" * 64},
}
NAME = "demo_ext-0.1.0+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl"
SHA = "a" * 64


def _bi(data: dict[str, Any]) -> BuildInfo:
    """The pure core takes the typed object: the test's dict, read as a wheel's file is."""
    return BuildInfo.from_json(data)


def _le(data: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry.from_json({"sha256": SHA, "size": 1, "published": [], **data})


def judge(name: str, sha256: str, info: BuildInfo, entry: LedgerEntry, same_name_sha256: str | None,
          found_now: dict[str, str], *, made_by_now: dict[str, MadeBy] | None = None) -> list[Refusal]:
    """The gate's refusals of a wheel whose extensions hold ``found_now``."""
    facts = WheelFacts(name, name, sha256, 0, {so: ArchList.parse(text) for so, text in found_now.items()}, {},
                       info, made_by=made_by_now)
    return refusals(facts, entry, same_name_sha256)


def test_name_problems() -> None:
    assert name_problems(NAME, _bi(INFO)) == []
    assert name_problems(NAME.replace("cp311-cp311", "cp312-cp312"), _bi(INFO)) == [
        "python tag cp312 but the cell is cp311"]
    assert name_problems(NAME.replace("-cp311-cp311", "-2-cp311-cp311"), _bi(INFO)) == [
        "build tag 2 but build_epoch is 0"]
    assert name_problems(NAME.replace("x86_64", "aarch64"), _bi(INFO)) == [
        "platform manylinux_2_28_aarch64 but the cell is linux_x86_64"]
    torch_free = {**INFO, "cell": {**INFO["cell"], "torch": "none"}}
    assert name_problems(NAME.replace("torch2.8", ""), _bi(torch_free)) == []
    # A version is compared as PEP 440 reads it, not as spelled ("0.1.0" is "00.1.0").
    assert name_problems(NAME, _bi({**INFO, "version": "00.1.0"})) == []
    assert name_problems(NAME, _bi({**INFO, "version": "0.1.1"})) == ["version 0.1.0 but provenance says '0.1.1'"]
    # a wheel variant's label (PEP 825) names no part of the cell; the build tag is still read
    assert name_problems(NAME.replace(".whl", "-0e224db9.whl"), _bi(INFO)) == []
    assert name_problems(NAME.replace("-cp311-cp311", "-2-cp311-cp311").replace(".whl", "-a1.whl"), _bi(INFO)) == [
        "build tag 2 but build_epoch is 0"]


def test_split_variant_label() -> None:
    assert split_variant_label("a-1.0-cp311-cp311-linux_x86_64.whl") == ("a-1.0-cp311-cp311-linux_x86_64.whl", None)
    assert split_variant_label("a-1.0-1-cp311-cp311-linux_x86_64.whl") == ("a-1.0-1-cp311-cp311-linux_x86_64.whl", None)
    assert split_variant_label("a-1.0-cp311-cp311-linux_x86_64-0e224db9.whl") == (
        "a-1.0-cp311-cp311-linux_x86_64.whl", "0e224db9")
    assert split_variant_label("a-1.0-1-cp311-cp311-linux_x86_64-null.whl") == (
        "a-1.0-1-cp311-cp311-linux_x86_64.whl", "null")
    # not a label: upper case, too long, a seventh part that is no label
    assert split_variant_label("a-1.0-1-cp311-cp311-linux_x86_64-ABC.whl")[1] is None
    assert split_variant_label("a-1.0-cp311-cp311-linux_x86_64-" + "x" * 17 + ".whl")[1] is None


def test_judge_inferred_and_failed_are_refused() -> None:
    entry = {**INFO, "filename": NAME, "sha256": SHA}
    assert judge(NAME, SHA, _bi(INFO), _le(entry), None, INFO["found"]) == []
    inferred = {**INFO, "provenance": "inferred", "assertion": None}
    (r,) = judge(NAME, SHA, _bi(inferred), _le({**inferred, "filename": NAME}), None, INFO["found"])
    assert r.check is Check.ASSERTED
    # the schema itself refuses an asserted file that says failed; the core still judges the object
    failed = dataclasses.replace(_bi(INFO), assertion=Assertion("failed", "farm", None))
    (r,) = judge(NAME, SHA, failed, LedgerEntry(failed, NAME, SHA, 1), None, INFO["found"])
    assert r.check is Check.ASSERTED


def test_judge_ledger_entry_of_another_cell() -> None:
    entry = {**INFO, "filename": NAME, "cell": {**INFO["cell"], "torch": "2.7"}}
    (r,) = judge(NAME, SHA, _bi(INFO), _le(entry), None, INFO["found"])
    assert r.check is Check.LEDGER
    assert "cell" in r.message
    # Every provenance field counts, not only the cell's; the ledger's own keys do not.
    entry = {**INFO, "filename": NAME, "published": [{"target": "i", "url": "u"}], "recipe_sha256": "b" * 64}
    (r,) = judge(NAME, SHA, _bi(INFO), _le(entry), None, INFO["found"])
    assert r.check is Check.LEDGER
    assert "differ in recipe_sha256 " in r.message


def test_judge_device_code_of_another_cuda_line() -> None:
    """The cell says 12.8 (so does the name): the toolkit records recorded at postbuild, or read
    now, say 13.0: refused; records read now that differ from the recorded ones: refused too."""
    so = next(iter(INFO["found"]))
    assert INFO["cell"]["cuda"] == "12.8"
    assert "+cu128" in NAME
    made = {so: {"cubin": {"13.0": 2}, "ptx_isa": {"9.0": 1}, "unread": 0}}
    now = {so: MadeBy({"13.0": 2}, {"9.0": 1}, 0)}
    info = {**INFO, "made_by": made}
    refusals = judge(NAME, SHA, _bi(info), _le({**info, "filename": NAME}), None, INFO["found"], made_by_now=now)
    assert {r.check for r in refusals} == {Check.CONSISTENT, Check.INSPECTION}
    assert all("the cell's CUDA line is 12.8" in r.message for r in refusals)
    # a 13.0 wheel whose records changed since postbuild
    cu130 = {**INFO, "cell": {**INFO["cell"], "cuda": "13.0"}, "made_by": made}
    name = NAME.replace("cu128", "cu130")
    (r,) = judge(name, SHA, _bi(cu130), _le({**cu130, "filename": name}), None, INFO["found"],
                 made_by_now={so: MadeBy({"13.0": 1}, {"9.0": 1}, 0)})
    assert r.check is Check.INSPECTION
    assert "differ from those recorded at postbuild" in r.message
    assert judge(name, SHA, _bi(cu130), _le({**cu130, "filename": name}), None, INFO["found"], made_by_now=now) == []


def test_judge_passed_provenance_whose_found_is_not_its_expected_is_refused() -> None:
    forged = {**INFO, "expected": {"demo_ext/_C.so": "sm_80;sm_90;sm_100;compute_100"}}
    (r,) = judge(NAME, SHA, _bi(forged), _le({**forged, "filename": NAME}), None, INFO["found"])
    assert r.check is Check.ASSERTED
    assert r.message.endswith("differ: demo_ext/_C.so: missing compute_100;sm_100, extra compute_90")


def test_malformed_embedded_provenance_is_refused_not_a_crash(demo_batch: Batch, tmp_path: Path) -> None:
    """A _build_info.json with the right keys but wrong types (here an assertion that is a
    string) is refused with the schema's finding."""
    info = {k: v for k, v in json.loads(demo_batch.fragment.read_text()).items() if k not in buildinfo.LEDGER_KEYS}
    wheel = make_wheel(tmp_path, "demo_ext", "0.1.0+cu130", {
        "demo_ext/__init__.py": b"",
        "demo_ext-0.1.0+cu130.dist-info/_build_info.json": json.dumps({**info, "assertion": "passed"}).encode(),
    })
    (refusal,) = _gate(tmp_path).refused
    assert refusal.wheel == wheel.name
    assert refusal.check is Check.READABLE
    assert refusal.message.startswith(
        "cannot read the wheel: demo_ext-0.1.0+cu130.dist-info/_build_info.json: invalid build info at assertion")
    assert "\n" not in refusal.line()  # one line per offending wheel


def test_a_wheel_walking_through_the_gate_parses_each_recorded_list_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every arch list the wheel's provenance and its fragment record is decoded once, however
    many rules compare it; what the binary holds is never rendered and parsed again."""
    so, full = "demo_ext/_C.cpython-311-x86_64-linux-gnu.so", "sm_80;sm_90;compute_90"
    entry = make_entry(arch=full)
    entry["arch_list"]["requested"] = "8.0;9.0+PTX"
    entry["expected"] = entry["found"] = {so: full}
    binary = noted_extension(tmp_path, sass(80, 128), sass(90, 128), ptx((8, 7))).read_bytes()  # CUDA 12.8's
    stamped_wheel(tmp_path / "out", entry, extensions={so: binary})
    derived = Derived(ArchList.parse(full), "policy x86_64 12.8", Expected(ArchList.parse(full)))
    parsed: list[str] = []
    parse = ArchList.parse

    def counted(text: str, *, where: str | None = None) -> ArchList:
        parsed.append(text)
        return parse(text, where=where)

    monkeypatch.setattr(ArchList, "parse", counted)
    result = run_gate(sorted((tmp_path / "out").glob("*.whl")), Vouchers.load(None, [tmp_path / "out"]),
                      derive=lambda info: derived, reader="native")
    assert result.ok, result.lines()
    recorded = ["8.0;9.0+PTX", full, full, full]  # requested, normalised, expected and found of the extension
    assert sorted(parsed) == sorted(recorded * 2)  # in the wheel and in its fragment, once each


def test_found_difference_compares_sets_not_strings() -> None:
    def diff(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
        return found_difference({so: decode_list(text) for so, text in recorded.items()},
                                {so: decode_list(text) for so, text in now.items()})

    assert diff({"a.so": "sm_90;sm_80"}, {"a.so": "sm_80;sm_90"}) == []
    assert diff({"a.so": "sm_80"}, {"a.so": "sm_80", "b.so": ""}) == ["b.so is in the wheel but not recorded"]
    assert diff({"a.so": "sm_80;compute_80"}, {"a.so": "sm_80;sm_75"}) == ["a.so: missing compute_80, extra sm_75"]


def test_unreadable_wheel_refused(tmp_path: Path) -> None:
    (tmp_path / "demo_ext-0.1.0+cu130-cp311-cp311-linux_x86_64.whl").write_bytes(b"not a zip archive")
    (refusal,) = _gate(tmp_path).refused
    assert refusal.check is Check.READABLE


def test_cli_bad_input_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upload", str(tmp_path / "missing"), "--root", str(tmp_path)]) == 2
    assert main(["upload", str(tmp_path), "--root", str(tmp_path)]) == 2  # no wheels
    assert main(["index", str(tmp_path), "--root", str(tmp_path)]) == 2  # not an index tree
    err = capsys.readouterr().err
    assert "no wheels to upload" in err
    assert "not an index tree" in err


def test_cli_dry_run_sends_nothing(demo_batch: Batch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_farm_root(tmp_path / "farm")
    out = tmp_path / "out"
    copy_batch(demo_batch, out)
    assert main(["upload", str(out), "--root", str(root), "--dry-run"]) == 0
    assert "index (index): would send 1, already there 0" in capsys.readouterr().out
    assert not (root / "public").exists()
    assert not (root / "ledger.jsonl").exists()


def _forge_arch(so: bytes, new_arch: int) -> bytes:
    """Every fatbin entry header of ``so`` claims ``new_arch`` (u32 at +0x1C); payloads untouched."""
    import struct
    import tempfile

    from farm.binary.fatbin import read_fatbins

    data = bytearray(so)
    with tempfile.NamedTemporaryFile(suffix=".so") as fh:
        fh.write(so)
        fh.flush()
        for fatbin in read_fatbins(Path(fh.name)):
            for entry in fatbin.entries:
                struct.pack_into("<I", data, entry.offset + 0x1C, new_arch)
    return bytes(data)


def test_forged_header_with_consistent_provenance_is_refused(demo_batch: Batch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile contributor rewrites the fatbin headers to claim sm_90 where sm_80 was built, and
    writes a provenance (and fragment) that agrees with the forged headers. The header reader
    alone would be fooled, but each cubin's own note repeats its arch: the gate refuses the
    binary as contradicting itself, with either reader."""
    info = json.loads(demo_batch.fragment.read_text())
    so = next(iter(info["found"]))
    for key in ("filename", "sha256", "size", "published"):
        info.pop(key)
    info.update(found={so: "sm_90"}, expected={so: "sm_90"}, arch_list={"requested": "9.0", "normalised": "sm_90"})
    forged_raw = tmp_path / "raw" / demo_batch.raw.name
    forged_raw.parent.mkdir()
    with zipfile.ZipFile(demo_batch.raw) as zin:
        members = [(item.filename, zin.read(item)) for item in zin.infolist()]
    forged = _forge_arch(dict(members)[so], 90)
    digest = base64.urlsafe_b64encode(hashlib.sha256(forged).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(forged_raw, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, original in members:
            data = original
            if name == so:
                data = forged
            elif name.endswith("/RECORD"):  # a RECORD that agrees with the forged file
                data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(so.encode()))
                data += f"{so},sha256={digest},{len(forged)}\n".encode()
            zout.writestr(name, data)
    out = tmp_path / "out"
    stamped = stamp_wheel(forged_raw, out, local="cu130", build_tag=None, build_info=lambda _r, hashes: (
        BuildInfo.from_json({**info, "extensions": {so: hashes[so]}})))
    recorded = BuildInfo.from_json(_member(stamped.path, "_build_info.json"), where="x").extensions
    assert recorded is not None
    write_fragment({**info, "extensions": {so: recorded[so]},
                    "filename": stamped.filename, "sha256": stamped.sha256, "size": stamped.size, "published": []},
                   out)
    # The forgery is consistent with itself, but not with the cubin inside: its .note.nv.cuinfo
    # still says sm_80, so even the native reader alone refuses it now (it once passed).
    alone = run_gate([stamped.path], Vouchers.load(None, [out]), reader="native")
    assert not alone.ok
    assert "the cubin's .note.nv.cuinfo says sm_80, its fatbin entry sm_90" in alone.refused[0].message
    root = write_farm_root(tmp_path / "farm")  # its recipe asks for 8.0
    assert main(["upload", str(out), "--root", str(root), "--target", "index", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    checks = {r["check"]: r["message"] for r in doc["gate"]["refused"]}
    # a binary that contradicts itself is refused as unreadable before its provenance is weighed
    assert list(checks) == ["readable"]
    assert "says sm_80, its fatbin entry sm_90" in checks["readable"]
    assert doc["gate"]["readers"].startswith("native + cuobjdump")
    assert not (root / "public").exists()


def _member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith(suffix)))


def test_judge_provenance_that_contradicts_itself_is_refused() -> None:
    """requested -> normalised -> expected -> found must hold as one chain."""
    info = {**INFO, "arch_list": {"requested": "8.0", "normalised": "sm_80;sm_90;compute_90"}}
    entry = {**info, "filename": NAME, "sha256": SHA}
    (refusal,) = judge(NAME, SHA, _bi(info), _le(entry), None, INFO["found"])
    assert refusal.check is Check.CONSISTENT
    assert "requested 8.0 normalises to sm_80" in refusal.message
    info = {**INFO, "arch_list": {"requested": "not an arch list", "normalised": "sm_80"}}
    (refusal,) = judge(NAME, SHA, _bi(info), _le({**info, "filename": NAME, "sha256": SHA}), None, INFO["found"])
    assert refusal.check is Check.CONSISTENT
    assert "does not parse" in refusal.message


def test_an_oversized_provenance_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    big = b'{"x": "' + b"a" * (buildinfo.MAX_BUILD_INFO + 1) + b'"}'
    make_wheel(tmp_path, "demo_ext", "0.1.0+cu130", {"demo_ext/__init__.py": b"",
                                                     "demo_ext-0.1.0+cu130.dist-info/_build_info.json": big})
    (refusal,) = _gate(tmp_path).refused
    assert refusal.check is Check.READABLE
    assert "at most" in refusal.message


@pytest.mark.parametrize(("change", "says"), [
    ({"schema_version": 2}, "schema version 2: this farm reads version 1"),
    ({"run": {"provider": "local", "repository": None, "commit": None, "run_id": None, "attempt": None,
              "runner": "x"}}, "invalid build info: run has key(s) 'runner' this farm does not know"),
])
def test_a_provenance_this_farm_cannot_write_back_is_refused(demo_batch: Batch, tmp_path: Path,
                                                             change: dict[str, Any], says: str) -> None:
    """A newer farm's file, or one with a key this farm does not know, is not read as if it were
    this farm's: the gate refuses the wheel and names the file."""
    info = {k: v for k, v in json.loads(demo_batch.fragment.read_text()).items() if k not in buildinfo.LEDGER_KEYS}
    wheel = make_wheel(tmp_path, "demo_ext", "0.1.0+cu130", {
        "demo_ext/__init__.py": b"",
        "demo_ext-0.1.0+cu130.dist-info/_build_info.json": json.dumps({**info, **change}).encode(),
    })
    (refusal,) = _gate(tmp_path).refused
    assert refusal.wheel == wheel.name
    assert refusal.check is Check.READABLE
    assert refusal.message == f"cannot read the wheel: demo_ext-0.1.0+cu130.dist-info/_build_info.json: {says}"


def test_a_cuda_13_wheel_labelled_cu128_is_refused_by_the_gate(demo_batch: Batch, tmp_path: Path) -> None:
    """demo_ext built by nvcc 13.0, stamped +cu128 with a provenance that says cell CUDA 12.8 and
    a fragment that vouches for it (what an older farm's `postbuild --cuda 12.8` wrote): name,
    provenance and ledger agree (the older farm recorded no toolkit records), but the device code
    records CUDA 13.0, so the gate keeps it out of the cu128 channel."""
    out = tmp_path / "out"
    info = json.loads(demo_batch.fragment.read_text())
    for key in ("filename", "sha256", "size", "published"):
        info.pop(key)
    info["cell"] = {**info["cell"], "cuda": "12.8"}
    assert [set(m["cubin"]) for m in info.pop("made_by").values()] == [{"13.0"}]  # what postbuild read
    stamped = stamp_wheel(demo_batch.raw, out, local="cu128", build_tag=None, build_info=BuildInfo.from_json(info))
    write_fragment({**info, "filename": stamped.filename, "sha256": stamped.sha256, "size": stamped.size,
                    "published": []}, out)
    assert "+cu128" in stamped.filename
    result = _gate(out)
    assert not result.ok
    assert _checks(result) == {stamped.filename: {Check.INSPECTION}}
    (refusal,) = result.refused
    assert "not made by the cell's CUDA toolkit" in refusal.message
    assert "made by CUDA 13.0" in refusal.message
    assert "the cell's CUDA line is 12.8" in refusal.message
    assert "--cuda 12.8" in refusal.fix


def test_the_gate_runs_the_cuobjdump_a_wheel_records_and_no_other() -> None:
    """A wheel is re-inspected by cuobjdump of the version its assertion ran: found once per
    version; a version not installed here stops the gate (exit 3) naming it, never another run."""
    readers = GateReaders("auto")
    kind, tool = readers.of(PINNED)
    assert kind == "both"
    assert tool is not None
    assert cuobjdump_version(tool) == PINNED
    assert readers.of(None) == ("native", None)  # no cuobjdump recorded: nothing of it to compare
    assert readers.describe() == f"native, native + cuobjdump {PINNED}"
    with pytest.raises(ToolError, match=r"no cuobjdump 13\.0\.1 here") as info:
        readers.of("13.0.1")
    assert info.value.exit_code == 3
    assert "pip install nvidia-cuda-cuobjdump==13.0.1" in (info.value.hint or "")
    assert GateReaders("native").of(PINNED) == ("native", None)
    with pytest.raises(ToolError, match="records no cuobjdump version"):
        GateReaders("both").of(None)
