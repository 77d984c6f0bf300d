from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from farm.errors import EXIT_BAD_INPUT, LedgerError
from farm.provenance import buildinfo, ledgercache, ledgerfiles, ledgerline, shape
from farm.provenance import buildinfo as buildinfo_mod
from farm.provenance import ledger as ledger_mod
from farm.provenance.ledger import LedgerIndex, _lines, iter_entries
from farm.provenance.ledgerline import (
    ExistsKey,
    Provenance,
    Record,
    _fast_record,
    _validate_full,
    dumps_entry,
    validate_entry,
)
from farm.provenance.ledgerwrite import (
    FRAGMENT_SUFFIX,
    merge_fragments,
    record_published_many,
    write_fragment,
)
from tests.support.ledgermaker import make_entry

REPO = Path(__file__).resolve().parent.parent


def write_ledger(path: Path, entries: list[dict[str, Any]], *, trailing_newline: bool = True) -> Path:
    text = "\n".join(dumps_entry(e) for e in entries)
    path.write_text(text + ("\n" if trailing_newline and entries else ""))
    return path


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- reading ---------------------------------------------------------------------------------
def test_index_lookups_by_key_filename_and_sha(tmp_path: Path) -> None:
    entries = [make_entry(python=py) for py in ("cp310", "cp311", "cp312")]
    entries.append(make_entry(python="cp311", build_epoch=2))
    ledger = write_ledger(tmp_path / "ledger.jsonl", entries)
    index = LedgerIndex.load(ledger)

    assert len(index) == 4
    key = ExistsKey("demo_ext", "0.1.0", "12.8", "2.8", "cp311", "linux_x86_64", 0)
    rec = index.get(key)
    assert rec is not None
    assert rec.line == 2
    assert rec.filename == entries[1]["filename"]
    assert key in index
    assert replace(key, build_epoch=1) not in index
    assert index.get(replace(key, build_epoch=2)).line == 4  # type: ignore[union-attr]
    assert index.by_filename(entries[3]["filename"]).line == 4  # type: ignore[union-attr]
    assert index.by_sha256(entries[2]["sha256"]).line == 3  # type: ignore[union-attr]
    assert index.by_filename("nope-1.0-py3-none-any.whl") is None
    # The full entry is re-read from its line, equal to what was written.
    assert index.entry(rec) == entries[1]
    assert rec.arch == "sm_80;sm_90;compute_90"


def test_inferred_entries_count_as_epoch_0_and_asserted_outranks_them(tmp_path: Path) -> None:
    inferred = make_entry(provenance="inferred", filename="demo_ext-0.1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl")
    inferred["build_epoch"] = 5  # a guess: ignored
    asserted = make_entry(filename="demo_ext-0.1.0+cu128torch2.8-0-cp311-cp311-linux_x86_64.whl")
    index = LedgerIndex.load(write_ledger(tmp_path / "l.jsonl", [inferred, asserted]))
    key = ExistsKey("demo_ext", "0.1.0", "12.8", "2.8", "cp311", "linux_x86_64", 0)
    assert index.get(key).provenance is Provenance.ASSERTED  # type: ignore[union-attr]
    assert replace(key, build_epoch=5) not in index

    only_inferred = LedgerIndex.load(write_ledger(tmp_path / "i.jsonl", [inferred]))
    assert only_inferred.get(key).provenance is Provenance.INFERRED  # type: ignore[union-attr]


def test_inferred_entry_with_unknown_cell_is_indexed_by_name_only(tmp_path: Path) -> None:
    entry = make_entry(provenance="inferred")
    entry.update(package=None, version=None, cell=None, arch_list=None)
    index = LedgerIndex.load(write_ledger(tmp_path / "l.jsonl", [entry]))
    rec = index.by_filename(entry["filename"])
    assert rec is not None
    assert rec.key is None
    assert rec.arch is None


def test_last_line_without_newline_is_read(tmp_path: Path) -> None:
    entries = [make_entry(python="cp310"), make_entry(python="cp311")]
    index = LedgerIndex.load(write_ledger(tmp_path / "l.jsonl", entries, trailing_newline=False))
    assert [r.line for r in index.records] == [1, 2]


def test_empty_ledger_is_empty(tmp_path: Path) -> None:
    (tmp_path / "l.jsonl").write_text("")
    assert len(LedgerIndex.load(tmp_path / "l.jsonl")) == 0


BAD_LINES = {
    "not json": ("{not json", "not valid JSON"),
    "truncated": ('{"filename": "a-1-py3-none-any.whl", "sha', "not valid JSON"),
    "blank": ("", "empty line"),
    "array": ("[1, 2]", "must be a JSON object"),
    "bad provenance": (dumps_entry({**make_entry(), "provenance": "guessed"}), "'provenance'"),
    "bad sha": (dumps_entry({**make_entry(), "sha256": "ABC"}), "'sha256'"),
    "upper-case sha": (dumps_entry({**make_entry(), "sha256": "AB" * 32}), "'sha256'"),
    "spaced sha": (dumps_entry({**make_entry(), "sha256": "ab " * 21 + "a"}), "'sha256'"),
    "newline filename": (dumps_entry({**make_entry(), "filename": "a-1-py3-none-any.whl\nb.whl"}), "bare wheel"),
    "no filename": (dumps_entry({k: v for k, v in make_entry().items() if k != "filename"}), "'filename'"),
    "path filename": (dumps_entry({**make_entry(), "filename": "../x-1-py3-none-any.whl"}), "bare wheel"),
    "negative epoch": (dumps_entry({**make_entry(), "build_epoch": -1}), "'build_epoch'"),
    "bool size": (dumps_entry({**make_entry(), "size": True}), "'size'"),
    "asserted null cell": (dumps_entry({**make_entry(), "cell": None}), "'cell'"),
    "asserted null arch": (dumps_entry({**make_entry(), "arch_list": {"requested": "8.0", "normalised": None}}),
                           "'normalised'"),
    "bad published": (dumps_entry({**make_entry(), "published": [{"target": "gh"}]}), "'published'"),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_malformed_line_is_an_error_naming_its_line(tmp_path: Path, name: str) -> None:
    bad, message = BAD_LINES[name]
    good = [dumps_entry(make_entry(python=py)) for py in ("cp310", "cp311", "cp312")]
    path = tmp_path / "ledger.jsonl"
    path.write_text("\n".join([good[0], good[1], bad, good[2]]) + "\n")
    with pytest.raises(LedgerError) as info:
        LedgerIndex.load(path)
    assert f"{path}:3" in str(info.value)
    assert message in str(info.value)
    assert info.value.exit_code == EXIT_BAD_INPUT
    with pytest.raises(LedgerError, match=":3"):
        list(iter_entries(path))


def test_the_first_bad_line_is_the_one_named(tmp_path: Path) -> None:
    """Filenames and sha256s are checked for all lines at once; a bad one before a line that
    is not even JSON is still the one named."""
    good = dumps_entry(make_entry(python="cp310"))
    bad_sha = dumps_entry({**make_entry(python="cp311"), "sha256": "F" * 64})
    path = tmp_path / "ledger.jsonl"
    path.write_text("\n".join([good, bad_sha, good.replace("cp310", "cp312"), "{not json"]) + "\n")
    with pytest.raises(LedgerError, match=r"ledger.jsonl:2: 'sha256'"):
        LedgerIndex.load(path)


def test_same_filename_twice_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    a = make_entry()
    b = {**a, "sha256": "0" * 64}
    path = write_ledger(tmp_path / "l.jsonl", [make_entry(python="cp310"), a, b])
    with pytest.raises(LedgerError, match=r":3: .*already recorded at line 2, with another sha256"):
        LedgerIndex.load(path)
    path = write_ledger(tmp_path / "l.jsonl", [a, a])
    with pytest.raises(LedgerError, match="the same sha256 again"):
        LedgerIndex.load(path)


def test_missing_ledger_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="no ledger here"):
        LedgerIndex.load(tmp_path / "absent.jsonl")


def test_validate_entry_returns_the_exists_key() -> None:
    rec = validate_entry(make_entry(torch="none", python="abi3", build_epoch=3), "x")
    assert rec.key == ExistsKey("demo_ext", "0.1.0", "12.8", "none", "abi3", "linux_x86_64", 3)


@pytest.mark.parametrize("entry", [
    make_entry(),
    make_entry(torch="none", python="abi3", build_epoch=3, published=[{"target": "index", "url": "files/x.whl"}]),
    make_entry(provenance="inferred"),
], ids=["asserted", "torch-free", "inferred"])
def test_test_entries_follow_the_build_info_schema(entry: dict[str, Any]) -> None:
    """The entries these tests feed the ledger are ones postbuild and backfill could write."""
    buildinfo.validate(entry)
    validate_entry(entry, "x")


# -- fragments -------------------------------------------------------------------------------
def test_write_fragment_is_one_file_per_wheel_and_idempotent(tmp_path: Path) -> None:
    frags = tmp_path / "frags"
    entry = make_entry()
    path = write_fragment(entry, frags)
    assert path == frags / (entry["filename"] + FRAGMENT_SUFFIX)
    assert json.loads(path.read_text()) == entry
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert write_fragment(entry, frags) == path
    assert [p.name for p in frags.iterdir()] == [path.name]  # no temp files left behind

    with pytest.raises(LedgerError, match="already exists with sha256"):
        write_fragment({**entry, "sha256": "f" * 64}, frags)
    assert json.loads(path.read_text()) == entry


def test_write_fragment_refuses_an_invalid_entry_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="'sha256'"):
        write_fragment({**make_entry(), "sha256": None}, tmp_path / "frags")
    assert not (tmp_path / "frags").exists()


# -- merging ---------------------------------------------------------------------------------
def test_merge_appends_new_wheels_and_is_idempotent(tmp_path: Path) -> None:
    ledger = write_ledger(tmp_path / "ledger.jsonl", [make_entry(python="cp310")])
    frags = tmp_path / "frags"
    new = [make_entry(python=py) for py in ("cp311", "cp312")]
    for e in new + [make_entry(python="cp310")]:
        write_fragment(e, frags)

    result = merge_fragments(ledger, frags)
    assert sorted(result.added) == sorted(e["filename"] for e in new)
    assert result.already == (make_entry(python="cp310")["filename"],)
    assert len(LedgerIndex.load(ledger)) == 3

    again = merge_fragments(ledger, frags)
    assert again.added == ()
    assert len(again.already) == 3
    assert len(ledger.read_text().splitlines()) == 3


def test_merge_creates_the_ledger_and_ends_an_unterminated_last_line(tmp_path: Path) -> None:
    frags = tmp_path / "frags"
    write_fragment(make_entry(python="cp312"), frags)
    fresh = tmp_path / "fresh.jsonl"
    assert len(merge_fragments(fresh, frags).added) == 1
    assert len(LedgerIndex.load(fresh)) == 1

    ledger = write_ledger(tmp_path / "l.jsonl", [make_entry(python="cp310")], trailing_newline=False)
    merge_fragments(ledger, frags)
    assert [r.line for r in LedgerIndex.load(ledger).records] == [1, 2]


def test_merge_refuses_another_sha256_and_changes_nothing(tmp_path: Path) -> None:
    old = make_entry(python="cp311")
    ledger = write_ledger(tmp_path / "ledger.jsonl", [old])
    before = ledger.read_bytes()
    frags = tmp_path / "frags"
    write_fragment(make_entry(python="cp312"), frags)  # would be fine on its own
    write_fragment({**old, "sha256": "e" * 64}, frags)
    with pytest.raises(LedgerError, match="already in the ledger with sha256 .*Nothing was merged"):
        merge_fragments(ledger, frags)
    assert ledger.read_bytes() == before


def test_merge_refuses_a_malformed_ledger_or_fragment(tmp_path: Path) -> None:
    frags = tmp_path / "frags"
    write_fragment(make_entry(python="cp312"), frags)
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(dumps_entry(make_entry()) + "\n{oops\n")
    with pytest.raises(LedgerError, match=":2"):
        merge_fragments(ledger, frags)
    assert ledger.read_text().endswith("{oops\n")

    good = write_ledger(tmp_path / "good.jsonl", [make_entry()])
    (frags / ("x-1-py3-none-any.whl" + FRAGMENT_SUFFIX)).write_text("{}")
    with pytest.raises(LedgerError, match="x-1-py3-none-any.whl"):
        merge_fragments(good, frags)
    assert len(good.read_text().splitlines()) == 1


_MERGER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from farm.provenance.ledgerwrite import merge_fragments, write_fragment
    from tests.support.ledgermaker import make_entry
    ledger, work, start, tag = Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
    while not start.exists():
        time.sleep(0.001)
    for batch in range(25):
        frags = work / f"{tag}-{batch}"
        for i in range(8):
            # Both processes write wheels 0..3 of each batch (identical bytes): the overlap.
            owner = "shared" if i < 4 else tag
            write_fragment(make_entry(f"pkg_{owner}", f"{batch}.{i}"), frags)
        merge_fragments(ledger, frags)
    """
)


def test_two_processes_merging_at_once_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("")
    start = tmp_path / "start"
    script = tmp_path / "merger.py"
    script.write_text(_MERGER)
    procs = [
        subprocess.Popen([sys.executable, str(script), str(REPO), str(ledger), str(tmp_path), str(start), tag])
        for tag in ("a", "b")
    ]
    start.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]

    names = [r.filename for r in LedgerIndex.load(ledger).records]  # every line valid
    expected = {
        make_entry(f"pkg_{owner}", f"{batch}.{i}")["filename"]
        for batch in range(25)
        for i in range(8)
        for owner in (("shared",) if i < 4 else ("a", "b"))
    }
    assert len(names) == len(set(names))  # nothing duplicated
    assert set(names) == expected  # nothing lost
    assert len(names) == 25 * (4 + 4 + 4)


def test_merge_killed_before_its_rename_leaves_the_ledger_as_it_was(tmp_path: Path) -> None:
    """A real crash (no cleanup runs) mid-merge: the ledger keeps its old bytes, every line
    whole, and the next merge completes."""
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(dumps_entry(make_entry("old")) + "\n")
    before = ledger.read_bytes()
    frags = tmp_path / "frags"
    write_fragment(make_entry("new"), frags)
    code = textwrap.dedent(f"""
        import os
        from pathlib import Path
        from farm import fsutil
        from farm.provenance import ledgerwrite
        fsutil.os.replace = lambda a, b: os._exit(9)
        ledgerwrite.merge_fragments(Path({str(ledger)!r}), Path({str(frags)!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 9, proc.stderr
    assert ledger.read_bytes() == before
    assert merge_fragments(ledger, frags).added == (make_entry("new")["filename"],)
    assert [r.filename for r in LedgerIndex.load(ledger).records] == [
        make_entry("old")["filename"], make_entry("new")["filename"]]


# -- publishing ------------------------------------------------------------------------------
def test_record_published_many_rewrites_one_line_and_keeps_the_others(tmp_path: Path) -> None:
    entries = [make_entry(python=py) for py in ("cp310", "cp311", "cp312")]
    ledger = tmp_path / "ledger.jsonl"
    # Lines written by hand (other key order, spaces) must survive byte for byte.
    raw = [json.dumps(e) for e in entries]
    ledger.write_text("\n".join(raw) + "\n")
    ledger.chmod(0o664)
    target = entries[1]

    assert record_published_many(ledger, [(target["filename"], target["sha256"], "index", "https://x/a.whl")]) == 1
    lines = ledger.read_text().splitlines()
    assert lines[0] == raw[0]
    assert lines[2] == raw[2]
    assert json.loads(lines[1])["published"] == [{"target": "index", "url": "https://x/a.whl"}]
    assert oct(ledger.stat().st_mode & 0o777) == oct(0o664)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.jsonl", "ledger.jsonl.lock"]

    # Same target/url again: nothing to do.
    before = ledger.read_bytes()
    assert record_published_many(ledger, [(target["filename"], target["sha256"], "index", "https://x/a.whl")]) == 0
    assert ledger.read_bytes() == before
    assert record_published_many(ledger, [(target["filename"], target["sha256"], "github", "https://gh/a.whl")]) == 1
    assert [p["target"] for p in lines_of(ledger)[1]["published"]] == ["index", "github"]


def test_record_published_many_rewrites_once_and_checks_everything_first(tmp_path: Path) -> None:
    entries = [make_entry(python=py) for py in ("cp310", "cp311", "cp312")]
    ledger = write_ledger(tmp_path / "ledger.jsonl", entries)
    items = [(e["filename"], e["sha256"], "index", f"https://x/{e['filename']}") for e in entries]
    # one bad item refuses the whole batch: nothing is written
    before = ledger.read_bytes()
    with pytest.raises(LedgerError, match="recorded with sha256"):
        record_published_many(ledger, [*items[:2], (entries[2]["filename"], "1" * 64, "index", "u")])
    assert ledger.read_bytes() == before
    assert record_published_many(ledger, items + [items[0]]) == 3  # a repeat within the batch counts once
    assert [e["published"] for e in lines_of(ledger)] == [[{"target": "index", "url": u}] for *_, u in items]
    assert record_published_many(ledger, items) == 0


def test_record_published_refuses_unknown_wheel_or_other_sha(tmp_path: Path) -> None:
    entry = make_entry()
    ledger = write_ledger(tmp_path / "ledger.jsonl", [entry])
    before = ledger.read_bytes()
    with pytest.raises(LedgerError, match="not in the ledger"):
        record_published_many(ledger, [("other-1.0-py3-none-any.whl", entry["sha256"], "index", "u")])
    with pytest.raises(LedgerError, match=":1: .*recorded with sha256"):
        record_published_many(ledger, [(entry["filename"], "1" * 64, "index", "u")])
    assert ledger.read_bytes() == before


# -- the fast path of validation agrees with the full one ------------------------------------
_DELETE = object()
_VALUES = [_DELETE, None, True, False, -1, 0, 1, 1.5, "", "x", "x/y.whl", "x.whl", "0" * 64, "A" * 64, [], {},
           [{"target": "t"}], [{"target": "t", "url": 1}], ["t"], {"normalised": ""}, {"normalised": None},
           "asserted", "inferred"]
_PATHS = [("provenance",), ("filename",), ("sha256",), ("size",), ("schema_version",), ("published",),
          ("package",), ("version",), ("build_epoch",), ("cell",), ("cell", "cuda"), ("cell", "platform"),
          ("arch_list",), ("arch_list", "normalised")]


@settings(max_examples=400)
@given(st.lists(st.tuples(st.sampled_from(_PATHS), st.sampled_from(_VALUES)), max_size=3),
       st.sampled_from(["asserted", "inferred"]))
def test_fast_validation_accepts_only_what_the_full_validation_accepts(
    mutations: list[tuple[tuple[str, ...], object]], provenance: str
) -> None:

    entry = make_entry(provenance=provenance, published=[{"target": "t", "url": "u"}])
    for path, value in mutations:
        holder: Any = entry
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            if value is _DELETE:
                holder.pop(path[-1], None)
            else:  # a copy: the sampled values are shared between examples and must never alias
                holder[path[-1]] = copy.deepcopy(value)
    fast = _fast_record(entry)
    if fast is not None:
        assert _validate_full(entry, "x") == fast
    if not mutations and provenance == "asserted":
        assert fast is not None  # the common case takes the fast path
    # the index's loader (typed decoder plus the checks of all lines at once) accepts exactly
    # what the full validation accepts, with the same record
    try:
        full: Record | None = _validate_full(entry, "x", 1, 0)
    except LedgerError:
        full = None
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Path(tmp) / "ledger.jsonl"
        ledger.write_bytes(orjson.dumps(entry) + b"\n")
        try:
            loaded: Record | None = LedgerIndex.load(ledger).records[0]
        except LedgerError:
            loaded = None
    assert loaded == full


@pytest.mark.parametrize("path", _PATHS, ids="/".join)
def test_every_single_change_the_fast_path_accepts_the_full_validation_accepts(path: tuple[str, ...]) -> None:
    """Each field the index decodes, set to each sampled value: the exhaustive single-change
    counterpart of the property test above (which samples combinations)."""
    for value in _VALUES:
        entry = make_entry(published=[{"target": "t", "url": "u"}])
        holder: Any = entry
        for key in path[:-1]:
            holder = holder[key]
        if value is _DELETE:
            del holder[path[-1]]
        else:
            holder[path[-1]] = copy.deepcopy(value)
        fast = _fast_record(entry)
        if fast is not None:
            assert _validate_full(entry, "x") == fast, (path, value)


@pytest.mark.parametrize("size", [1, 7, 64, 1 << 22])
def test_lines_are_read_whole_whatever_the_read_size(size: int) -> None:
    """The index reads in large chunks; a line split across reads (or longer than one) is whole."""

    text = b'{"a":1}\n' + b"x" * 200 + b"\n\n" + b'{"b":"' + b"y" * 100 + b'"}'
    lines = text.splitlines(keepends=True)
    offsets = [sum(map(len, lines[:i])) for i in range(len(lines))]
    assert list(_lines(io.BytesIO(text), Path("ledger.jsonl"), size)) == list(zip(range(1, 5), offsets, lines, strict=True))


@pytest.mark.parametrize("size", [1, 7, 64, 1 << 22])
def test_a_line_over_the_cap_is_refused_whatever_the_read_size(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """One cap, wherever a read ends: a line of MAX_LINE bytes is read, one byte more is refused."""
    monkeypatch.setattr(ledger_mod, "MAX_LINE", 100)
    fits = b"x" * 99 + b"\n"
    assert [n for n, _, _ in _lines(io.BytesIO(fits * 2), Path("ledger.jsonl"), size)] == [1, 2]
    for text in (fits + b"y" * 100 + b"\n", fits + b"y" * 101):
        with pytest.raises(LedgerError, match="line 2 is longer than 100 bytes"):
            list(_lines(io.BytesIO(text), Path("ledger.jsonl"), size))


# --------------------------------------------------------------------------------------------
# The index cache
# --------------------------------------------------------------------------------------------
def _cache_files(cache: Path) -> list[Path]:
    return sorted((cache / "ledger-index").glob("*.msgpack")) if (cache / "ledger-index").is_dir() else []


def test_index_cache_serves_an_unchanged_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledgercache, "_RACY_NS", 0)
    entries = [make_entry(python=py) for py in ("cp310", "cp311")] + [make_entry(python="cp312", provenance="inferred")]
    entries[0]["duration_s"] = 60.0  # what the matrix plans with is indexed, and cached, with the key
    entries[1]["toolchain"]["compile_cache"] = {"tool": "sccache", "compiles": 100, "hits": 90, "misses": 10}
    path = write_ledger(tmp_path / "ledger.jsonl", entries)
    cache = tmp_path / "cache"
    cold = LedgerIndex.load(path, cache_dir=cache)
    assert len(_cache_files(cache)) == 1
    assert [(r.duration, r.compile_cache) for r in cold.records] == [(60.0, None), (None, (100, 90)), (None, None)]

    def no_parse(*args: object) -> None:
        raise AssertionError("the ledger was parsed although its index is cached")

    monkeypatch.setattr(ledger_mod, "_parse", no_parse)
    warm = LedgerIndex.load(path, cache_dir=cache)
    assert warm.records == cold.records
    for rec in cold.records:
        assert warm.by_filename(rec.filename) == rec
        if rec.key is not None:
            assert warm.get(rec.key) == cold.get(rec.key)


def test_index_cache_misses_on_any_change_of_the_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(ledgercache, "_RACY_NS", 0)
    path = write_ledger(tmp_path / "ledger.jsonl", [make_entry(python="cp310"), make_entry(python="cp311")])
    cache = tmp_path / "cache"
    LedgerIndex.load(path, cache_dir=cache)
    time.sleep(0.05)  # past the file system's timestamp granularity (the racy window is tested below)
    # the same size, in place: only the timestamps tell
    text = path.read_text()
    old_sha = make_entry(python="cp311")["sha256"]
    new_sha = old_sha[::-1]
    with path.open("r+") as handle:
        handle.write(text.replace(old_sha, new_sha))
    assert path.read_text() != text
    assert len(path.read_text()) == len(text)
    assert LedgerIndex.load(path, cache_dir=cache).by_sha256(new_sha) is not None
    # an appended line
    time.sleep(0.05)
    with path.open("a") as handle:
        handle.write(dumps_entry(make_entry(python="cp312")) + "\n")
    assert len(LedgerIndex.load(path, cache_dir=cache)) == 3
    # a bad line appended is an error, never hidden by the cache
    time.sleep(0.05)
    with path.open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(LedgerError, match=":4"):
        LedgerIndex.load(path, cache_dir=cache)


def test_a_just_written_ledger_is_not_cached(tmp_path: Path) -> None:
    """Racily clean: a same-size rewrite within the timestamps' granularity could go unseen."""
    path = write_ledger(tmp_path / "ledger.jsonl", [make_entry()])
    LedgerIndex.load(path, cache_dir=tmp_path / "cache")
    assert _cache_files(tmp_path / "cache") == []


def test_a_bad_or_unwritable_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledgercache, "_RACY_NS", 0)
    path = write_ledger(tmp_path / "ledger.jsonl", [make_entry(python="cp310"), make_entry(python="cp311")])
    cache = tmp_path / "cache"
    expected = LedgerIndex.load(path).records
    LedgerIndex.load(path, cache_dir=cache)
    (cached,) = _cache_files(cache)
    for garbage in (b"", b"\xc1" * 100, cached.read_bytes()[:-7]):
        cached.write_bytes(garbage)
        assert LedgerIndex.load(path, cache_dir=cache).records == expected
    # a cache directory that cannot be created: the load still succeeds
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert LedgerIndex.load(path, cache_dir=blocker / "cache").records == expected


def test_the_index_cache_is_keyed_on_every_module_that_makes_a_record() -> None:
    """A change to the definition, the line's checks or the indexing makes every cache stale."""
    files = {Path(m.__file__ or "").name for m in (shape, buildinfo_mod, ledgerline, ledger_mod, ledgerfiles)}
    assert set(ledgercache._RULES) == files
    assert all((Path(ledgercache.__file__ or "").parent / name).is_file() for name in ledgercache._RULES)
