"""Where a ledger record goes: one segment per package and build epoch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from farm.cli import main
from farm.errors import LedgerError
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import LedgerIndex, iter_entries
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerfiles import is_segment, ledger_location, segment_of, segments
from farm.provenance.ledgerline import dumps_entry
from farm.provenance.ledgerwrite import merge_fragments, migrate, record_published_many, write_fragment
from tests.support.ledgermaker import make_entry, raw_lines


def test_a_record_goes_to_its_package_and_epoch() -> None:
    assert segment_of("flash_attn", 0) == "flash_attn/e0.jsonl"
    assert segment_of("torch-scatter", 12) == "torch-scatter/e12.jsonl"
    assert is_segment("flash_attn/e0.jsonl")
    assert not is_segment("flash_attn/e0.json")
    assert not is_segment("e0.jsonl")
    assert not is_segment("a/b/e0.jsonl")


@pytest.mark.parametrize(("package", "epoch"), [("", 0), ("../x", 0), (".hidden", 0), ("a/b", 0), ("p", -1)])
def test_no_segment_outside_the_folder(package: str, epoch: int) -> None:
    with pytest.raises(LedgerError, match="no ledger segment"):
        segment_of(package, epoch)


def test_ten_bumps_leave_every_segment_the_size_of_one_packages_epoch() -> None:
    """The public farm's grid: 16,390 cells of 45 packages (the largest ~1,500), ~2 KB a
    record; ten epoch bumps make ten segments per package, each the size of one epoch."""
    packages = {f"p{i}": 1500 if i == 0 else 340 for i in range(45)}
    sizes: Counter[str] = Counter()
    for epoch in range(10):
        for pkg, n in packages.items():
            sizes[segment_of(pkg, epoch)] += n * 2048
    assert len(sizes) == 450
    assert max(sizes.values()) == 1500 * 2048 < 50 * 1024 * 1024


# -- a ledger folder, as every reader and writer sees it -------------------------------------------------

def entry(package: str = "demo_ext", python: str = "cp311", epoch: int = 0, **kw: object) -> LedgerEntry:
    return LedgerEntry.from_json(make_entry(package, python=python, build_epoch=epoch, **kw), where="test")  # type: ignore[arg-type]


def folder(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    (path / "README.md").write_text("the ledger\n")
    return path


def test_records_go_to_their_segments_and_every_reader_sees_them_all(tmp_path: Path) -> None:
    ledger = folder(tmp_path)
    book = LedgerBook.open(ledger)
    for e in (entry(), entry(python="cp312"), entry(epoch=1), entry("other_pkg")):
        book.record(e, "github", f"https://example.org/{e.filename}")
    assert sorted(name for name, _ in segments(ledger)) == [
        "demo_ext/e0.jsonl", "demo_ext/e1.jsonl", "other_pkg/e0.jsonl"]
    assert len((ledger / "demo_ext" / "e0.jsonl").read_text().splitlines()) == 2
    index = LedgerIndex.load(ledger)
    assert len(index) == 4
    for rec in index.records:  # each line read back from its own file
        assert index.ledger_entry(rec).filename == rec.filename
    assert len(list(iter_entries(ledger))) == 4
    assert len(list(raw_lines(ledger))) == 4
    # the book's own appended records read back too, and a second target rewrites the one line
    added = book.by_filename(entry(epoch=1).filename)
    assert added is not None
    assert added.segment == "demo_ext/e1.jsonl"
    assert added.line == 1
    book.record(entry(epoch=1), "index", "https://index/x")
    book.flush()
    (rec,) = [r for r in LedgerIndex.load(ledger).records if r.segment == "demo_ext/e1.jsonl"]
    assert [p.target for p in LedgerIndex.load(ledger).ledger_entry(rec).published] == ["github", "index"]


def test_another_writer_of_any_segment_makes_the_book_read_again(tmp_path: Path) -> None:
    ledger = folder(tmp_path)
    book = LedgerBook.open(ledger)
    book.record(entry(), "github", "u")
    other = LedgerBook.open(ledger)
    other.record(entry("other_pkg"), "github", "u2")  # a new segment, by someone else
    book.record(entry(python="cp312"), "github", "u3")
    assert book.reloads == 1
    assert len(LedgerIndex.load(ledger)) == 3


def test_one_wheel_in_two_segments_names_both_files(tmp_path: Path) -> None:
    ledger = folder(tmp_path)
    e = make_entry()
    for epoch in (0, 1):
        (ledger / "demo_ext").mkdir(exist_ok=True)
        (ledger / "demo_ext" / f"e{epoch}.jsonl").write_text(dumps_entry(e) + "\n")
    with pytest.raises(LedgerError, match=r"e1\.jsonl:1: .*already recorded at .*e0\.jsonl:1"):
        LedgerIndex.load(ledger)


@pytest.mark.parametrize("stray", ["notes.txt", "demo_ext/e0.json", "demo_ext/x/e0.jsonl", "demo_ext/ledger.jsonl"])
def test_a_file_the_folder_should_not_hold_is_refused_by_name(tmp_path: Path, stray: str) -> None:
    ledger = folder(tmp_path)
    path = ledger / stray
    path.parent.mkdir(parents=True, exist_ok=True)
    if stray.endswith("/e0.jsonl") and "/x/" in stray:
        path.write_text("")
    else:
        path.write_text(dumps_entry(make_entry()) + "\n")
    with pytest.raises(LedgerError, match="not a"):
        LedgerIndex.load(ledger)


def test_a_linked_segment_is_refused(tmp_path: Path) -> None:
    ledger = folder(tmp_path)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(dumps_entry(make_entry()) + "\n")
    (ledger / "demo_ext").mkdir()
    (ledger / "demo_ext" / "e0.jsonl").symlink_to(outside)
    with pytest.raises(LedgerError, match="not a plain file"):
        LedgerIndex.load(ledger)


def test_fragments_and_publications_are_written_to_their_segments(tmp_path: Path) -> None:
    ledger = folder(tmp_path)
    fragments = tmp_path / "fragments"
    for e in (entry(), entry(epoch=2)):
        write_fragment(e, fragments)
    assert merge_fragments(ledger, fragments).added
    assert sorted(name for name, _ in segments(ledger)) == ["demo_ext/e0.jsonl", "demo_ext/e2.jsonl"]
    assert record_published_many(ledger, [(entry(epoch=2).filename, entry(epoch=2).sha256, "github", "u")]) == 1
    index = LedgerIndex.load(ledger)
    (rec,) = [r for r in index.records if r.segment == "demo_ext/e2.jsonl"]
    assert index.ledger_entry(rec).published[0].url == "u"
    assert merge_fragments(ledger, fragments).already  # idempotent


def test_the_repository_ledger_is_its_folder_until_a_single_file_is_migrated(tmp_path: Path) -> None:
    assert ledger_location(tmp_path) == tmp_path / "ledger"
    (tmp_path / "ledger.jsonl").write_text("")
    assert ledger_location(tmp_path) == tmp_path / "ledger.jsonl"
    (tmp_path / "ledger").mkdir()
    with pytest.raises(LedgerError, match="two ledgers"):
        ledger_location(tmp_path)


def test_a_ledger_written_by_todays_code_migrates_with_one_command_and_nothing_lost(tmp_path: Path, capsys) -> None:
    """A single ledger.jsonl as farm writes it (a publish's appended records, a merged fragment,
    a second target's publication, an inferred entry of a backfill): `farm ledger migrate` moves
    every line, byte for byte, and the matrix's view of it is the same."""
    root = tmp_path / "repo"
    root.mkdir()
    single = root / "ledger.jsonl"
    book = LedgerBook.open(single)
    for e in (entry(), entry(python="cp312"), entry(epoch=1), entry("other_pkg")):
        book.record(e, "github", f"https://example.org/{e.filename}")
    book.record(entry(), "index", "https://index/demo")
    book.flush()
    fragments = tmp_path / "fragments"
    write_fragment(LedgerEntry.from_json(make_entry("third", provenance="inferred", build_epoch=None), where="t"),
                   fragments)
    merge_fragments(single, fragments)
    before = LedgerIndex.load(single)
    lines = sorted(single.read_bytes().splitlines())
    assert main(["ledger", "migrate", "--root", str(root)]) == 0
    assert "moved 5 record(s)" in capsys.readouterr().out
    assert not single.exists()
    ledger = root / "ledger"
    assert ledger_location(root) == ledger
    assert sorted(raw.rstrip(b"\n") for raw in raw_lines(ledger)) == lines
    after = LedgerIndex.load(ledger)
    assert {r.filename: (r.sha256, r.key) for r in after.records} == {
        r.filename: (r.sha256, r.key) for r in before.records}
    assert sorted(name for name, _ in segments(ledger)) == [
        "demo_ext/e0.jsonl", "demo_ext/e1.jsonl", "other_pkg/e0.jsonl", "third/e0.jsonl"]
    assert main(["ledger", "check", "--root", str(root)]) == 0
    # done once: a second run says so, changing nothing
    assert main(["ledger", "migrate", "--root", str(root)]) == 2
    assert "already the ledger/ folder" in capsys.readouterr().err


def test_a_migration_into_a_folder_with_records_refuses_and_keeps_the_file(tmp_path: Path) -> None:
    single = tmp_path / "ledger.jsonl"
    single.write_text(dumps_entry(make_entry()) + "\n")
    ledger = folder(tmp_path)
    (ledger / "x").mkdir()
    (ledger / "x" / "e0.jsonl").write_text(dumps_entry(make_entry("x")) + "\n")
    with pytest.raises(LedgerError, match="already holds records"):
        migrate(single, ledger)
    assert single.exists()
