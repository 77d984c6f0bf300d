"""The ledger held open by a publish: records appended, read back by the ledger's own reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from farm.errors import LedgerError
from farm.provenance.buildinfo import LedgerEntry
from farm.provenance.ledger import LedgerIndex, iter_entries
from farm.provenance.ledgerbook import LedgerBook
from farm.provenance.ledgerline import dumps_entry
from tests.support.ledgermaker import make_entry

URL = "https://github.com/o/r/releases/download/t/"


def entry(python: str = "cp311", **kw: object) -> LedgerEntry:
    return LedgerEntry.from_json(make_entry(python=python, **kw), where="test")  # type: ignore[arg-type]


def write(path: Path, *entries: LedgerEntry) -> Path:
    path.write_text("".join(dumps_entry(e) + "\n" for e in entries))
    return path


def test_a_new_wheel_is_one_appended_line_the_reader_knows(tmp_path: Path) -> None:
    first = entry("cp310")
    ledger = write(tmp_path / "ledger.jsonl", first)
    before = ledger.read_bytes()
    book = LedgerBook.open(ledger)
    new = entry("cp312")
    got = book.record(new, "github", URL + new.filename)
    assert (got.added, got.published) == (True, True)
    # the old bytes are untouched: the record is appended, not rewritten
    assert ledger.read_bytes().startswith(before)
    assert ledger.read_bytes().count(b"\n") == 2
    index = LedgerIndex.load(ledger)
    rec = index.by_filename(new.filename)
    assert rec is not None
    assert rec == book.by_filename(new.filename)  # the book's record is the one the reader makes
    assert [(p.target, p.url) for p in index.ledger_entry(rec).published] == [("github", URL + new.filename)]
    assert book.by_sha256(new.sha256) == rec
    assert book.reloads == 0


def test_recording_again_is_a_no_op_and_another_sha256_is_refused(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"  # no file yet: an empty ledger
    book = LedgerBook.open(ledger)
    wheel = entry()
    book.record(wheel, "github", URL)
    after = ledger.read_bytes()
    assert book.record(wheel, "github", URL).published is False
    assert ledger.read_bytes() == after
    other = LedgerEntry.from_json({**make_entry(), "sha256": "f" * 64}, where="test")
    with pytest.raises(LedgerError, match="is recorded with sha256"):
        book.record(other, "github", URL)
    assert ledger.read_bytes() == after


def test_a_second_target_changes_the_wheels_own_line(tmp_path: Path) -> None:
    wheel = entry()
    ledger = write(tmp_path / "ledger.jsonl", entry("cp310"), wheel.with_published("github", URL))
    book = LedgerBook.open(ledger)
    got = book.record(wheel, "index", "files/x.whl")
    assert (got.added, got.published) == (False, True)
    assert book.flush() == 1
    lines = [e for _, e in iter_entries(ledger)]
    assert len(lines) == 2
    assert [p["target"] for p in lines[1]["published"]] == ["github", "index"]


def test_second_targets_of_recorded_wheels_are_written_in_one_rewrite(tmp_path: Path) -> None:
    """Wheels the ledger holds, each reaching another target: the file is untouched until the
    flush, then rewritten once for all of them; a publication recorded twice is held once."""
    wheels = [entry(py) for py in ("cp310", "cp311", "cp312")]
    ledger = write(tmp_path / "ledger.jsonl", *(w.with_published("github", URL) for w in wheels))
    before = ledger.read_bytes()
    book = LedgerBook.open(ledger)
    for w in wheels:
        assert book.record(w, "mirror", f"https://mirror.example/{w.filename}").published
    assert not book.record(wheels[0], "mirror", f"https://mirror.example/{wheels[0].filename}").published
    assert ledger.read_bytes() == before  # held, not yet written
    assert len(book.pending) == 3
    assert book.flush() == 3
    assert book.rewrites == 1
    assert [[p["target"] for p in e["published"]] for _, e in iter_entries(ledger)] == [["github", "mirror"]] * 3
    assert book.flush() == 0  # nothing held: nothing written
    assert book.rewrites == 1
    assert not book.record(wheels[1], "mirror", f"https://mirror.example/{wheels[1].filename}").published


def test_a_file_changed_by_another_writer_is_read_again(tmp_path: Path) -> None:
    """A rebase of the ledger commit rewrites the file under the book: it is not believed, it is
    read and validated again, so a record the other side made is never appended twice."""
    ledger = write(tmp_path / "ledger.jsonl", entry("cp310"))
    book = LedgerBook.open(ledger)
    theirs = entry("cp312").with_published("github", URL)
    tmp = tmp_path / "rebased"
    write(tmp, entry("cp310"), theirs)
    tmp.replace(ledger)
    assert book.record(entry("cp312"), "github", URL).published is False
    assert book.reloads == 1
    assert len(LedgerIndex.load(ledger)) == 2

    # a bad line written by someone else is refused when read again, nothing appended
    with ledger.open("a") as fh:
        fh.write('{"not": "an entry"}\n')
    size = ledger.stat().st_size
    with pytest.raises(LedgerError, match=r"ledger\.jsonl:3"):
        book.record(entry("cp39"), "github", URL)
    assert ledger.stat().st_size == size


def test_a_last_line_without_its_newline_is_kept_and_a_torn_one_removed_by_the_next_book(tmp_path: Path,
                                                                                         capsys) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(dumps_entry(entry("cp310")))  # complete, no newline
    book = LedgerBook.open(ledger)
    book.record(entry("cp311"), "github", URL)
    assert [e["cell"]["python"] for _, e in iter_entries(ledger)] == ["cp310", "cp311"]

    # a process killed mid-append leaves half a line: every reader refuses it, with its line; the
    # next publish's book removes it (its wheel is then found unrecorded and re-asserted)
    whole = ledger.read_bytes()
    ledger.write_bytes(whole + (dumps_entry(entry("cp312")) + "\n").encode()[:100])
    with pytest.raises(LedgerError, match=r"ledger\.jsonl:3"):
        list(iter_entries(ledger))
    assert len(LedgerBook.open(ledger)) == 2
    assert ledger.read_bytes() == whole
    assert "removed an incomplete last line (100 bytes" in capsys.readouterr().err


def test_the_records_of_many_wheels_cost_one_read(tmp_path: Path) -> None:
    """A publish job's records: the ledger is read once, every later record is an append
    (no record re-reads or rewrites the file: its inode and old bytes stay)."""
    base = [entry(python=f"cp3{i}") for i in range(8, 13)]
    ledger = write(tmp_path / "ledger.jsonl", *base)
    inode = ledger.stat().st_ino
    book = LedgerBook.open(ledger)
    names = []
    for epoch in range(1, 41):
        e = entry("cp311", build_epoch=epoch)
        book.record(e, "github", URL + e.filename)
        names.append(e.filename)
    assert ledger.stat().st_ino == inode
    assert book.reloads == 0
    index = LedgerIndex.load(ledger)
    assert len(index) == len(book) == 45
    assert [r.filename for r in index.records[5:]] == names
    assert all(json.loads(line)["published"] for line in ledger.read_text().splitlines()[5:])


def test_a_targets_batch_is_appended_and_its_changed_lines_rewritten_once(tmp_path: Path) -> None:
    old = [entry(p).with_published("github", URL + p) for p in ("cp310", "cp311")]
    ledger = write(tmp_path / "ledger.jsonl", *old)
    book = LedgerBook.open(ledger)
    new = entry("cp312")
    got = book.record_many([(e, "index", f"files/{e.filename}") for e in (*old, new)])
    assert [(g.added, g.published) for g in got] == [(False, True), (False, True), (True, True)]
    assert book.reloads == 1  # the one rewrite, read back
    lines = [e for _, e in iter_entries(ledger)]
    assert [[p["target"] for p in e["published"]] for e in lines] == [["github", "index"], ["github", "index"],
                                                                      ["index"]]
    assert [g.published for g in book.record_many([(e, "index", f"files/{e.filename}") for e in (*old, new)])] == [
        False, False, False]
