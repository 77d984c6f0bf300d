"""No cache changes a verdict: every cache CI may restore is forged here, and the command answers
as it did before (a forged entry is a miss, recomputed; never believed, never an error)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import msgspec
import pytest

from farm import cacheseal
from farm.cli import main
from farm.lint.memo import RACY_NS
from farm.lint.report import LintReport
from farm.provenance import ledgercache as ledger_mod
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from tests.support.ledgermaker import make_entry

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "lint"
HEAD = len(b"farm-sealed-1\n") + 32


@pytest.fixture(autouse=True)
def own_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This user's key (as CI's secret would be); the forger does not know it."""
    monkeypatch.setenv(cacheseal.KEY_ENV, "the key of this farm's CI")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(cacheseal.KEY_FILE_ENV, raising=False)


def _aged(tree: Path) -> None:
    past = time.time() - 60
    for path in [*tree.rglob("*"), tree]:
        os.utime(path, (past, past))


def _forge(blob: bytes, change, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What a forger can write, given a sealed entry: its payload changed, left unsealed (the
    format farm used to write), resealed with a key of their own, or the old tag kept."""
    payload = change(blob[HEAD:] if blob.startswith(b"farm-sealed-1\n") else blob)
    with monkeypatch.context() as m:
        m.setenv(cacheseal.KEY_ENV, "a key the forger chose")
        resealed = cacheseal.seal(payload, "any")
    return [payload, resealed, blob[:HEAD] + payload]


def test_a_forged_lint_answer_changes_neither_lint_nor_matrix(tmp_path: Path, capsys, monkeypatch) -> None:
    """Emptying a cached entry's findings turned `farm lint` exit 1 into 0 and let `farm matrix`
    schedule the package ("lint: passed"). Both the source-identity cache (cache.py) and the
    remembered command output (memo.py) are forged; the verdicts stay."""
    newest = max(p.stat().st_mtime_ns for p in (REPO / "farm").rglob("*.py"))
    if (wait := (newest + RACY_NS - time.time_ns()) / 1e9) > 0:
        time.sleep(wait + 0.05)  # farm's own modules are inputs of a remembered answer
    root = tmp_path / "farm"
    (root / "packages").mkdir(parents=True)
    shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
    shutil.copytree(DATA / "sage_fp8", root / "src")
    (root / "packages" / "sage.yml").write_text("name: sage\nversion: '1.0'\nsource: {path: src}\nlinks_torch: true\n"
                                                "arch:\n  list: '8.0;8.6;9.0+PTX'\n")
    (root / "ledger.jsonl").write_text("")
    _aged(root)
    lint = ["lint", "sage", "--root", str(root), "--json"]
    matrix = ["matrix", "sage", "--root", str(root), "--cuda", "12.8", "--torch", "2.8", "--python", "3.11", "--json"]
    assert main(lint) == 1
    verdict = capsys.readouterr().out
    assert main(matrix) == 1  # the lint failed: the check found defects
    planned = json.loads(capsys.readouterr().out)
    assert planned["lint"]["passed"] is False
    entries = sorted((root / ".cache" / "lint").iterdir())
    assert {p.suffix for p in entries} == {".json", ".bin"}

    def clean_report(payload: bytes) -> bytes:
        data = json.loads(payload)
        data["errors"], data["infos"] = [], []
        LintReport.from_json(data)  # still a well-formed report
        return json.dumps(data).encode()

    def clean_answer(payload: bytes) -> bytes:
        entry = json.loads(payload)
        entry["code"], entry["text"] = 0, "PASSED: 0 errors"
        entry["json"] = entry["json"].replace('"passed": false', '"passed": true')
        return json.dumps(entry).encode()

    originals = {p: p.read_bytes() for p in entries}
    for path, blob in originals.items():
        for forged in _forge(blob, clean_report if path.suffix == ".json" else clean_answer, monkeypatch):
            for other, original in originals.items():
                other.write_bytes(forged if other == path else original)
            _aged(root / ".cache")
            assert main(lint) == 1
            assert capsys.readouterr().out == verdict
            assert main(matrix) == 1
            assert json.loads(capsys.readouterr().out) == planned


def test_an_entry_moved_under_another_key_does_not_verify() -> None:
    blob = cacheseal.seal(b"answer", "lint:aaaa")
    assert cacheseal.unseal(blob, "lint:aaaa") == b"answer"
    assert cacheseal.unseal(blob, "lint:bbbb") is None
    assert cacheseal.unseal(b"", "lint:aaaa") is None


def test_without_a_secret_the_key_file_is_private_and_outside_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(cacheseal.KEY_ENV)
    blob = cacheseal.seal(b"x", "p")
    key = tmp_path / "config" / "farm" / "cache.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.stat().st_size == 32
    assert cacheseal.unseal(blob, "p") == b"x"
    key.write_bytes(b"short")  # not a key farm wrote: nothing verifies, nothing fails
    assert cacheseal.unseal(blob, "p") is None


def test_a_reencoded_ledger_index_with_a_valid_stamp_is_not_believed(tmp_path: Path, monkeypatch) -> None:
    """The index cache keyed by the ledger's stamp: a forger re-encodes it with other records (here:
    none, so every cell would look unbuilt; or the records of another ledger) and a stamp that
    matches the file. Loading reads the ledger itself."""
    monkeypatch.setattr(ledger_mod, "_RACY_NS", 0)
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(dumps_entry(make_entry(python=py)) + "\n" for py in ("cp310", "cp311")))
    cache = tmp_path / "cache"
    truth = LedgerIndex.load(path, cache_dir=cache)
    (file,) = (cache / "ledger-index").iterdir()
    blob = file.read_bytes()

    def fewer(payload: bytes) -> bytes:
        decoded = msgspec.msgpack.decode(payload, type=ledger_mod._Cache)
        return msgspec.msgpack.encode(ledger_mod._Cache(decoded.format, decoded.code, decoded.stamp,
                                                        decoded.records[:1]))

    for forged in _forge(blob, fewer, monkeypatch):
        file.write_bytes(forged)
        loaded = LedgerIndex.load(path, cache_dir=cache)
        assert [r.filename for r in loaded.records] == [r.filename for r in truth.records]


def test_a_forged_ledger_index_does_not_change_the_matrix(tmp_path: Path, capsys, monkeypatch) -> None:
    """`farm matrix` with every cell built: a forger re-encodes the cached index without the
    records (so every cell would be scheduled again) with a stamp that matches the ledger; the
    matrix still finds every cell built."""
    from tests.test_matrix import farm_matrix, ledger_from_cells, make_tree

    monkeypatch.setattr(ledger_mod, "_RACY_NS", 0)
    root = make_tree(tmp_path / "farm")
    cache = tmp_path / "cache"
    _, first, _ = farm_matrix(capsys, root, "--cache-dir", str(cache))
    ledger_from_cells(root, first["cells"])
    rc, built, _ = farm_matrix(capsys, root, "--cache-dir", str(cache))  # writes the index cache
    assert rc == 0
    assert built["cells"] == []
    assert built["totals"]["built"] == len(first["cells"])
    (file,) = (cache / "ledger-index").iterdir()
    blob = file.read_bytes()

    def forget(payload: bytes) -> bytes:
        decoded = msgspec.msgpack.decode(payload, type=ledger_mod._Cache)
        return msgspec.msgpack.encode(ledger_mod._Cache(decoded.format, decoded.code, decoded.stamp, []))

    for forged in _forge(blob, forget, monkeypatch):
        file.write_bytes(forged)
        assert farm_matrix(capsys, root, "--cache-dir", str(cache))[:2] == (rc, built)
