"""Audit and backfill over real wheels: one wheel of each verdict, built for the test."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import farm.netutil
import farm.provenance.crawl as crawl_module
from farm.cli import main
from farm.errors import LedgerError, WheelError
from farm.load.recipes import load_config
from farm.model.arch import ArchList
from farm.provenance import buildinfo
from farm.provenance.audit import AuditRow, AuditVerdict, _newest_by_cell, _superseder, audit, judge
from farm.provenance.backfill import backfill, inferred_cell
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.judge import derive_from_config
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.provenance.ledgerwrite import merge_fragments
from farm.provenance.postbuild import context_from_config, postbuild_wheel
from farm.provenance.stamp import WheelName
from farm.provenance.wheelfacts import WheelFacts, wheel_facts
from tests.support import loopback
from tests.support.cudafix import BASE, CudaFixtures
from tests.support.ledgermaker import make_entry
from tests.support.postbuildfix import SO, TAG, builder_wheel, write_farm_root
from tests.support.publishfix import serve_dir
from tests.support.wheelmaker import make_wheel

SO_LIST = "sm_80;sm_90;compute_90"


class Fleet:
    """A folder of published wheels, one per verdict, the ledger, and today's farm root."""

    def __init__(self, pub: Path, ledger: Path, root_now: Path, names: dict[AuditVerdict, str]) -> None:
        self.pub, self.ledger, self.root_now, self.names = pub, ledger, root_now, names


def retamper(stamped: Path, so: Path, dest_dir: Path) -> Path:
    """``stamped`` with its extension swapped for ``so`` after stamping (RECORD made valid again)."""
    name = WheelName.parse(stamped.name)
    with zipfile.ZipFile(stamped) as zf:
        files: dict[str, bytes | Path] = {
            i.filename: zf.read(i) for i in zf.infolist()
            if not i.filename.endswith(("/RECORD", "/METADATA", "/WHEEL"))
        }
    files[f"{name.dist}/{SO}"] = so
    return make_wheel(dest_dir, name.dist, name.version, files, tag=TAG)


@pytest.fixture(scope="module")
def fleet(cuda_fixtures: CudaFixtures, cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    work = tmp_path_factory.mktemp("fleet")
    so = cuda_fixtures.path("default")  # sm_80, sm_90, compute_90
    root_then = write_farm_root(work / "then", {"demo_ok": BASE, "demo_moved": BASE, "demo_wrong": BASE})
    config = load_config(root_then)
    raw, pub, frags = work / "raw", work / "pub", work / "fragments"
    stamped = {}
    for dist in ("demo_ok", "demo_moved", "demo_wrong"):
        wheel = builder_wheel(raw, dist, so)
        context, recipe = context_from_config(config, wheel, cuda_home=cuda_home, builder="native")
        result = postbuild_wheel(wheel, pub, context, dist=recipe.dist, fragments_dir=frags)
        assert result.passed, result.report.render()
        assert result.stamped, result.report.render()
        stamped[dist] = result.stamped.path
    ledger = work / "ledger.jsonl"
    merge_fragments(ledger, frags)

    # wheel-wrong: the extension was replaced after stamping (an sm_90a-only build)
    wrong = retamper(stamped["demo_wrong"], cuda_fixtures.path("sm90a"), work / "tampered")
    shutil.move(str(wrong), str(stamped["demo_wrong"]))
    # unledgered: a wheel nobody recorded (labelled for the CUDA line whose nvcc made its binary)
    unledgered = builder_wheel(pub, "demo_unknown", so, version="0.1.0+cu130torch2.8")
    # inferred: recorded by an earlier backfill of that one file
    inferred = builder_wheel(work / "old", "demo_old", so, version="2.0+cu130")
    backfill(str(inferred), ledger)
    shutil.copy(inferred, pub / inferred.name)

    # today's policy: demo_moved's list dropped 8.0
    root_now = write_farm_root(work / "now", {"demo_ok": BASE, "demo_moved": "9.0+PTX", "demo_wrong": BASE})
    names = {
        AuditVerdict.OK: stamped["demo_ok"].name,
        AuditVerdict.CONFIG_MOVED: stamped["demo_moved"].name,
        AuditVerdict.WHEEL_WRONG: stamped["demo_wrong"].name,
        AuditVerdict.UNLEDGERED: unledgered.name,
        AuditVerdict.INFERRED: inferred.name,
    }
    return Fleet(pub, ledger, root_now, names)


def by_name(rows: list[AuditRow]) -> dict[str, AuditRow]:
    return {r.filename: r for r in rows}


def test_one_wheel_of_each_verdict(fleet: Fleet) -> None:
    rows = by_name(audit(str(fleet.pub), LedgerIndex.load(fleet.ledger), derive_from_config(load_config(fleet.root_now))))
    assert {rows[name].verdict for name in fleet.names.values()} == set(AuditVerdict)
    for verdict, name in fleet.names.items():
        assert rows[name].verdict is verdict, rows[name]
    wrong = rows[fleet.names[AuditVerdict.WHEEL_WRONG]]
    assert wrong.source == "embedded"
    assert any(f"demo_wrong/{SO}: recorded as holding {SO_LIST}, the binary holds sm_90a;compute_90a" == r
               for r in wrong.reasons), wrong.reasons
    assert any("the ledger records sha256" in r for r in wrong.reasons)
    moved = rows[fleet.names[AuditVerdict.CONFIG_MOVED]]
    assert moved.reasons[0] == f"demo_moved/{SO}: built for {SO_LIST}, today's policy resolves sm_90;compute_90"
    assert rows[fleet.names[AuditVerdict.OK]].reasons == ()
    assert rows[fleet.names[AuditVerdict.INFERRED]].source == "ledger"


def test_without_todays_config_a_moved_policy_is_not_seen(fleet: Fleet) -> None:
    rows = by_name(audit(str(fleet.pub), LedgerIndex.load(fleet.ledger)))
    assert rows[fleet.names[AuditVerdict.CONFIG_MOVED]].verdict is AuditVerdict.OK
    assert rows[fleet.names[AuditVerdict.WHEEL_WRONG]].verdict is AuditVerdict.WHEEL_WRONG


def test_cli_table_json_and_exit_code(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["audit", str(fleet.pub), "--root", str(fleet.root_now), "--ledger", str(fleet.ledger)]
    assert main([*argv, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["counts"] == {v.value: 1 for v in AuditVerdict}
    assert {w["filename"]: w["verdict"] for w in out["wheels"]} == {n: v.value for v, n in fleet.names.items()}

    summary = tmp_path / "summary.md"
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(argv) == 1
    captured = capsys.readouterr()
    text = captured.out
    assert "wheel-wrong" in text
    assert "config-moved" in text
    assert "1 ok, 1 wheel-wrong" in text
    assert f"audit: [5] {max(fleet.names.values())}: wheel-wrong" in captured.err
    assert f"| {fleet.names[AuditVerdict.WHEEL_WRONG]} | wheel-wrong |" in summary.read_text()


def test_cli_exit_0_without_wheel_wrong(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "good"
    folder.mkdir()
    shutil.copy(fleet.pub / fleet.names[AuditVerdict.OK], folder)
    assert main(["audit", str(folder), "--root", str(fleet.root_now), "--ledger", str(fleet.ledger), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["ok"] == 1


@pytest.fixture
def index_url(fleet: Fleet) -> Iterator[str]:
    """The published folder served on loopback as a directory-listing index."""
    with loopback.serve(fleet.pub.parent) as url:
        yield f"{url}{fleet.pub.name}/"


def test_audit_over_an_index_url(fleet: Fleet, index_url: str) -> None:
    rows = audit(index_url, LedgerIndex.load(fleet.ledger), derive_from_config(load_config(fleet.root_now)))
    assert {r.filename: r.verdict for r in rows} == {n: v for v, n in fleet.names.items()}
    assert all(r.location.startswith(index_url) for r in rows)


def test_backfill_then_audit_says_inferred(fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = tmp_path / "ledger.jsonl"
    shutil.copy(fleet.ledger, ledger)
    before = ledger.read_bytes()
    assert main(["backfill", str(fleet.pub), "--root", str(fleet.root_now), "--ledger", str(ledger), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["added"] == [fleet.names[AuditVerdict.UNLEDGERED]]
    reasons = {s["filename"]: s["reason"] for s in result["skipped"]}
    assert reasons[fleet.names[AuditVerdict.OK]] == "has embedded provenance"
    assert reasons[fleet.names[AuditVerdict.INFERRED]] == "already in the ledger"
    assert ledger.read_bytes().startswith(before), "backfill only appends"

    index = LedgerIndex.load(ledger)
    record = index.by_filename(fleet.names[AuditVerdict.UNLEDGERED])
    assert record is not None
    entry = index.entry(record)
    buildinfo.validate(entry)
    assert entry["provenance"] == "inferred"
    assert entry["cell"] == {"cuda": "13.0", "torch": "2.8", "python": TAG.split("-")[0], "platform": "linux_x86_64"}
    assert entry["found"] == {f"demo_unknown/{SO}": SO_LIST}
    for unknown in ("package", "build_epoch", "expected", "assertion", "defaults_sha256", "recipe_sha256",
                    "run", "source", "toolchain"):
        assert entry[unknown] is None, unknown
    assert entry["arch_list"] == {"requested": None, "normalised": None}

    rows = by_name(audit(str(fleet.pub), index))
    assert rows[fleet.names[AuditVerdict.UNLEDGERED]].verdict is AuditVerdict.INFERRED
    # a second backfill adds nothing
    assert backfill(str(fleet.pub), ledger).added == ()


def test_a_wheel_whose_binary_another_toolkit_made_is_wheel_wrong_from_its_bytes(cuda_fixtures: CudaFixtures,
                                                                                 tmp_path: Path) -> None:
    """A published wheel labelled ``+cu126`` whose cubins CUDA 13.0 made, backfilled (the ledger's
    inferred cell says 12.6, as its name does, and its targets match): the audit reads the toolkit
    version the device code records and calls it wrong, naming both versions."""
    so = cuda_fixtures.path("default")  # compiled by this test session's nvcc, CUDA 13.0
    wheel = builder_wheel(tmp_path / "pub", "demo_relabelled", so, version="2.0+cu126")
    ledger = tmp_path / "ledger.jsonl"
    backfill(str(wheel), ledger)
    (row,) = audit(str(wheel), LedgerIndex.load(ledger))
    assert row.verdict is AuditVerdict.WHEEL_WRONG, row
    (reason,) = row.reasons
    assert "made by CUDA 13.0" in reason
    assert "the cell's CUDA line is 12.6" in reason


def test_unreadable_wheel_is_wheel_wrong_not_a_crash(tmp_path: Path) -> None:
    bad = tmp_path / "demo_bad-1.0-cp311-cp311-linux_x86_64.whl"
    bad.write_bytes(b"not a zip")
    (row,) = audit(str(tmp_path), LedgerIndex.empty())
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert "zip" in row.reasons[0]


def test_cli_table_keeps_one_line_per_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A multi-line reason (message + fix) shows its first line in the table, in full below it."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "demo_bad-1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"not a zip")
    assert main(["audit", str(tmp_path / "wheels"), "--root", str(tmp_path)]) == 1
    table = capsys.readouterr().out.split("\n\n", 1)[0].splitlines()
    assert len(table) == 3
    assert table[2].startswith("demo_bad-1.0-cp311-cp311-linux_x86_64.whl  wheel-wrong")


def test_misnamed_wheel_is_wheel_wrong_and_backfill_skips_it(fleet: Fleet, tmp_path: Path) -> None:
    shutil.copy(fleet.pub / fleet.names[AuditVerdict.UNLEDGERED], tmp_path / "renamed.whl")
    (row,) = audit(str(tmp_path), LedgerIndex.empty())
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert "'renamed.whl' is not a wheel file name" in row.reasons[0]
    result = backfill(str(tmp_path), tmp_path / "ledger.jsonl")
    assert result.added == ()
    assert result.skipped[0][0] == "renamed.whl"
    assert not (tmp_path / "ledger.jsonl").exists()


def test_corrupt_compressed_member_is_wheel_wrong_not_a_crash(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo_bad", "1.0", {"demo_bad/_C.so": bytes(range(256)) * 4000}, tag=TAG)
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("demo_bad/_C.so")
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)  # the deflate stream
    data[start + 5:start + 60] = bytes(b ^ 0xFF for b in data[start + 5:start + 60])
    wheel.write_bytes(bytes(data))
    (row,) = audit(str(tmp_path), LedgerIndex.empty())
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert row.reasons[0].startswith("entry 'demo_bad/_C.so' is corrupt (Error -3 while decompressing data")


def test_judge_inferred_that_no_longer_matches_is_wheel_wrong() -> None:
    facts = WheelFacts("a-1.0-cp311-cp311-linux_x86_64.whl", "x", "1" * 64, 1, {"a/_C.so": ArchList.parse("sm_80")},
                       {"a/_C.so": "2" * 64}, None)
    info = buildinfo.inferred_build_info(dist="a", version="1.0", cell={}, found={"a/_C.so": "sm_80;sm_90"},
                                         extensions={"a/_C.so": "2" * 64})
    row = judge(facts, info.ledger_entry(filename=facts.filename, sha256=facts.sha256, size=1), None)
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert row.reasons == ("a/_C.so: recorded as holding sm_80;sm_90, the binary holds sm_80",)


def test_inferred_cell_from_names() -> None:
    cell = inferred_cell(WheelName.parse("x-1.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl"))
    assert cell == {"cuda": "13.0", "torch": "none", "python": "cp312", "platform": "linux_aarch64"}
    cell = inferred_cell(WheelName.parse("x-1.0-py3-none-any.whl"))
    assert cell == {"cuda": None, "torch": None, "python": None, "platform": None}


def test_wheel_facts_reads_embedded_provenance(fleet: Fleet) -> None:
    facts = wheel_facts(fleet.pub / fleet.names[AuditVerdict.OK])
    assert facts.embedded is not None
    assert facts.embedded.package == "demo_ok"
    assert facts.extensions == facts.embedded.extensions


def test_invalid_embedded_provenance_is_wheel_wrong(tmp_path: Path) -> None:
    make_wheel(tmp_path, "demo_bogus", "1.0+cu128", {
        "demo_bogus/__init__.py": b"",
        "demo_bogus-1.0+cu128.dist-info/_build_info.json": b'{"provenance": "asserted"}',
    }, tag=TAG)
    (row,) = audit(str(tmp_path), LedgerIndex.empty())
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert "invalid build info" in row.reasons[0]
    assert "_build_info.json" in row.reasons[0]


def test_judge_provenance_of_a_failed_assertion_is_wheel_wrong() -> None:
    # the schema refuses such a file on reading; the core still judges the object it is given
    failed = dataclasses.replace(
        buildinfo.inferred_build_info(dist="a", version="1.0", found={"a/_C.so": "sm_80"}, extensions={},
                                      cell={"cuda": "12.8", "torch": "none", "python": "cp311",
                                            "platform": "linux_x86_64"}),
        provenance="asserted", build_epoch=0, expected={"a/_C.so": "sm_80;sm_90"},
        assertion=buildinfo.Assertion("failed", None, None), extensions=None)
    facts = WheelFacts("a-1.0+cu128-cp311-cp311-linux_x86_64.whl", "x", "1" * 64, 1, {"a/_C.so": ArchList.parse("sm_80")},
                       {"a/_C.so": "2" * 64}, failed)
    row = judge(facts, None, None)
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert row.reasons == ("its provenance says the assertion failed",)


def test_stamped_wheel_renamed_to_another_cell_is_wheel_wrong(fleet: Fleet, tmp_path: Path) -> None:
    """Its bytes are the ledger's and its binary matches, but its name claims CUDA 12.8."""
    ok = fleet.names[AuditVerdict.OK]
    renamed = tmp_path / ok.replace("+cu130-", "+cu128-")
    shutil.copy(fleet.pub / ok, renamed)
    (row,) = audit(str(renamed), LedgerIndex.load(fleet.ledger))
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert row.reasons == ("file name: local label cu128 but the cell is cu130",)


def test_ledger_entry_of_the_wrong_shape_is_a_ledger_error(fleet: Fleet, tmp_path: Path) -> None:
    """A ledger line the exists-key check accepts but whose nested fields have other types names
    its line instead of crashing the verdict."""
    ledger = tmp_path / "ledger.jsonl"
    lines = fleet.ledger.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    (at,) = [i for i, e in enumerate(entries) if e["filename"] == fleet.names[AuditVerdict.OK]]
    entries[at]["found"] = ["sm_80"]
    ledger.write_text("".join(json.dumps(e) + "\n" for e in entries))
    wheel = tmp_path / "wheels"
    wheel.mkdir()
    shutil.copy(fleet.pub / fleet.names[AuditVerdict.OK], wheel)
    with pytest.raises(LedgerError, match=rf"ledger.jsonl:{at + 1}.*invalid build info at found"):
        audit(str(wheel), LedgerIndex.load(ledger))


def test_index_link_with_an_escaping_file_name_is_not_downloaded(tmp_path: Path) -> None:
    """``..%2F..%2Fx.whl`` unquotes to a path outside the download folder: a finding, and no file
    is written anywhere."""
    site = tmp_path / "site"
    (site / "simple" / "demo").mkdir(parents=True)
    (site / "simple" / "demo" / "index.html").write_text(
        '<a href="..%2F..%2F..%2Fescaped-1.0-py3-none-any.whl">escaped</a>')
    (site / "escaped-1.0-py3-none-any.whl").write_bytes(b"served if the name were followed")
    server, base = serve_dir(site, tmp_path / "http.log")
    try:
        (row,) = audit(f"{base}/simple/demo/", LedgerIndex.empty())
    finally:
        server.stop()
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    name = "../../../escaped-1.0-py3-none-any.whl"
    assert row.reasons == (f"the index links a file named {name!r}, which is not a plain file name",)
    assert '"GET /simple/demo/..%2F' not in (tmp_path / "http.log").read_text()


def test_oversized_downloads_are_findings_not_disk_fills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caps (2 GiB a wheel, 64 MiB a page) lowered to a few bytes, the same code paths run."""
    site = tmp_path / "site"
    (site / "simple" / "demo").mkdir(parents=True)
    (site / "simple" / "demo" / "index.html").write_text('<a href="demo-1.0-py3-none-any.whl">demo</a>')
    (site / "simple" / "demo" / "demo-1.0-py3-none-any.whl").write_bytes(b"x" * 4096)
    server, base = serve_dir(site, tmp_path / "http.log")
    try:
        monkeypatch.setattr(crawl_module, "MAX_WHEEL_BYTES", 1024)
        (row,) = audit(f"{base}/simple/demo/", LedgerIndex.empty())
        assert row.verdict is AuditVerdict.WHEEL_WRONG
        assert "larger than" in row.reasons[0]
        monkeypatch.setattr(farm.netutil, "MAX_PAGE_BYTES", 10)
        with pytest.raises(WheelError, match="index page larger than"):
            audit(f"{base}/simple/demo/", LedgerIndex.empty())
    finally:
        server.stop()


# -- the fleet audit streams: disk use bounded by one wheel, whatever the fleet's size ----------
def test_a_fleet_larger_than_the_scratch_space_streams_through_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """12 published wheels of ~300 KiB (3.6 MiB) audited from the ledger with 1 MiB of scratch:
    each is downloaded, judged and deleted before the next; one of 2 MiB is a finding, never a
    full disk; 4 shards judge each wheel exactly once."""
    site, rng = tmp_path / "site" / "releases", random.Random(7)
    sizes = {f"fleet{i:02d}": 300_000 + 1000 * i for i in range(12)}
    sizes["fleet_huge"] = 2 << 20
    site.mkdir(parents=True)
    server, base = serve_dir(site.parent, tmp_path / "http.log")
    try:
        lines = []
        for dist, size in sizes.items():
            # incompressible payload: the wheel on disk is as large as it says
            wheel = make_wheel(site, dist, "1.0+cu128", {f"{dist}/data.bin": rng.randbytes(size)})
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            url = f"{base}/releases/{wheel.name}"
            lines.append(dumps_entry(make_entry(dist, "1.0", torch="none", filename=wheel.name, sha256=digest,
                                                published=[{"target": "github", "url": url}])) + "\n")
        ledger = tmp_path / "ledger.jsonl"
        ledger.write_text("".join(lines))
        fleet_bytes = sum(w.stat().st_size for w in site.iterdir())
        scratch = tmp_path / "scratch"
        argv = ["audit", "--from-ledger", "--ledger", str(ledger), "--root", str(tmp_path), "--no-config",
                "--scratch", str(scratch), "--max-scratch", "1", "--json"]
        main(argv)
        out = json.loads(capsys.readouterr().out)
        limit = 1 << 20
        assert fleet_bytes > 3 * limit
        assert out["scratch"]["limit_bytes"] == limit
        assert out["scratch"]["downloads"] == 12  # the huge one was cut off at the limit
        largest = max(w.stat().st_size for w in site.iterdir() if w.stat().st_size <= limit)
        assert out["scratch"]["peak_bytes"] == largest, "one wheel at a time"
        rows = {w["filename"]: w for w in out["wheels"]}
        assert len(rows) == 13
        huge = next(r for name, r in rows.items() if name.startswith("fleet_huge"))
        assert huge["verdict"] == "wheel-wrong"
        assert "scratch space" in huge["reasons"][0]
        assert all(r["verdict"] == "ok" for name, r in rows.items() if not name.startswith("fleet_huge"))
        assert list(scratch.iterdir()) == [], "every download is deleted"

        seen: list[str] = []
        for i in range(4):
            main([*argv, "--shard", f"{i}/4"])
            seen += [w["filename"] for w in json.loads(capsys.readouterr().out)["wheels"]]
        assert sorted(seen) == sorted(rows), "4 shards judge each wheel exactly once"
        assert list(scratch.iterdir()) == []
    finally:
        server.stop()


def test_a_config_moved_wheel_whose_rebuild_is_published_is_not_told_to_bump_again(tmp_path: Path) -> None:
    so = f"demo_ext/{SO}"
    old = {**make_entry(build_epoch=0, arch=SO_LIST, published=[{"target": "index", "url": "u0"}]),
           "expected": {so: SO_LIST}, "found": {so: SO_LIST}}
    new = {**make_entry(build_epoch=1, arch="sm_90;compute_90", published=[{"target": "index", "url": "u1"}]),
           "expected": {so: "sm_90;compute_90"}, "found": {so: "sm_90;compute_90"}}
    ledger_path = tmp_path / "ledger.jsonl"
    ledger_path.write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n")
    ledger = LedgerIndex.load(ledger_path)
    today = {so: ArchList.parse("sm_90;compute_90")}
    entry = LedgerEntry.from_json(old)
    facts = WheelFacts(old["filename"], old["filename"], old["sha256"], 1, {so: ArchList.parse(SO_LIST)}, {}, entry.info)
    before = judge(facts, entry, today)
    assert before.verdict is AuditVerdict.CONFIG_MOVED
    assert before.reasons[-1] == "bump build_epoch to rebuild"
    by = _superseder(ledger, _newest_by_cell(ledger), entry.info, today)
    assert by == new["filename"]
    after = judge(facts, entry, today, superseded_by=by)
    assert "bump" not in " ".join(after.reasons)
    assert f"superseded by {new['filename']}" in after.reasons[-1]
    # not yet published: still advise the bump (the rebuild has not reached users)
    ledger_path.write_text(json.dumps(old) + "\n" + json.dumps({**new, "published": []}) + "\n")
    ledger = LedgerIndex.load(ledger_path)
    assert _superseder(ledger, _newest_by_cell(ledger), entry.info, today) is None


def test_a_provenance_from_a_newer_farm_is_wheel_wrong_with_what_to_do(fleet: Fleet, tmp_path: Path) -> None:
    ok = fleet.pub / fleet.names[AuditVerdict.OK]
    with zipfile.ZipFile(ok) as zf:
        member = next(n for n in zf.namelist() if n.endswith("/_build_info.json"))
        info = json.loads(zf.read(member))
    make_wheel(tmp_path, "demo_newer", "1.0+cu130", {
        "demo_newer/__init__.py": b"",
        "demo_newer-1.0+cu130.dist-info/_build_info.json": json.dumps({**info, "schema_version": 3}).encode(),
    }, tag=TAG)
    (row,) = audit(str(tmp_path), LedgerIndex.empty())
    assert row.verdict is AuditVerdict.WHEEL_WRONG
    assert row.reasons[0] == ("demo_newer-1.0+cu130.dist-info/_build_info.json: schema version 3: this farm reads "
                              "version 1\n  fix: it was written by a newer farm: upgrade farm to read it")


def test_an_audit_of_nothing_says_so(tmp_path, capsys) -> None:
    """An empty ledger (or a folder without wheels) is not a clean fleet: a warning on stderr, in
    --json and in the step summary, never a silent all-clear."""
    from farm.cli import main

    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("")
    assert main(["audit", "--from-ledger", "--ledger", str(ledger), "--root", str(tmp_path), "--json"]) == 0
    captured = capsys.readouterr()
    assert "farm audit: warning: audited no wheel" in captured.err
    assert json.loads(captured.out)["warnings"][0].startswith("audited no wheel")
