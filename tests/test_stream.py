"""A publish shard streams its cells' artifacts one at a time: disk never holds more than one
artifact, and a missing artifact, a full disk or a refusal is that cell's verdict only."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from farm.errors import ToolError, UsageError
from farm.schedule.outcome import CellResult
from farm.schedule.stream import (
    ERROR,
    FAILED,
    PUBLISHED,
    REFUSED,
    CellVerdict,
    publish_shard,
    read_reports,
    shard_cells,
)
from tests.support.wheelmaker import make_wheel


class Store:
    """A run's artifacts as a folder per name (what ``gh run download --name`` fetches)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.peak = 0  # the most bytes the scratch folder held at once
        self.scratch: Path | None = None

    def add(self, cell_id: str, size: int) -> None:
        folder = self.root / f"wheels-{cell_id}"
        make_wheel(folder, "pkg", "1.0", {"pkg/blob.bin": b"\0" * size}, tag="cp311-cp311-linux_x86_64")
        (folder / "wheel.whl.ledger.json").write_text("{}")

    def fetch(self, cell_id: str, dest: Path) -> bool:
        src = self.root / f"wheels-{cell_id}"
        if not src.is_dir():
            return False
        shutil.copytree(src, dest)
        assert self.scratch is not None
        held = sum(p.stat().st_size for p in self.scratch.rglob("*") if p.is_file())
        self.peak = max(self.peak, held)
        return True


def test_one_artifact_at_a_time(tmp_path: Path) -> None:
    store = Store(tmp_path / "artifacts")
    sizes = {f"c{i}": 1000 * (i + 1) for i in range(6)}
    for cid, size in sizes.items():
        store.add(cid, size)
    scratch = store.scratch = tmp_path / "scratch"
    seen: list[str] = []

    def publish(cell: CellResult) -> tuple[str, str]:
        assert all(p.exists() for p in cell.files)
        seen.append(cell.id)
        return PUBLISHED, ""

    verdicts = publish_shard([(c, "pkg") for c in [*sizes, "gone"]], store.fetch, publish, scratch)
    assert [v.status for v in verdicts] == [PUBLISHED] * 6 + [FAILED]
    assert seen == list(sizes)
    largest = max(v.artifact_bytes for v in verdicts)
    assert store.peak == largest, "the scratch folder held more than one artifact"
    assert list(scratch.iterdir()) == [], "the last artifact was not deleted"


def test_artifact_bytes_count_a_hard_linked_file_once(tmp_path: Path) -> None:
    """What the artifact held on disk: a file with two names under the folder is counted once."""
    store = Store(tmp_path / "artifacts")
    store.add("c", 1000)
    store.scratch = tmp_path / "scratch"
    held: list[int] = []

    def fetch(cell_id: str, dest: Path) -> bool:
        store.fetch(cell_id, dest)
        (wheel,) = dest.glob("*.whl")
        os.link(wheel, dest / "build.log")  # a second name for the wheel's bytes
        held.append(sum(p.stat().st_size for p in dest.iterdir() if p.name != "build.log"))
        return True

    (verdict,) = publish_shard([("c", "pkg")], fetch, lambda cell: (PUBLISHED, ""), store.scratch)
    assert verdict.status == PUBLISHED
    assert verdict.artifact_bytes == held[0]


def test_a_failure_is_the_cells_verdict_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "artifacts")
    for cid in ("full", "refused", "broken", "empty", "ok"):
        store.add(cid, 100)
    shutil.rmtree(tmp_path / "artifacts" / "wheels-empty")
    (tmp_path / "artifacts" / "wheels-empty").mkdir()
    (tmp_path / "artifacts" / "wheels-empty" / "build.log").write_text("nvcc died")
    store.scratch = tmp_path / "scratch"

    def fetch(cell_id: str, dest: Path) -> bool:
        if cell_id == "full":
            dest.mkdir(parents=True)
            (dest / "part").write_bytes(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")
        return store.fetch(cell_id, dest)

    def publish(cell: CellResult) -> tuple[str, str]:
        if cell.id == "refused":
            return REFUSED, "gate: not asserted"
        if cell.id == "broken":
            raise ToolError("HTTP 403: secondary rate limit")
        return PUBLISHED, ""

    got = {v.id: v for v in publish_shard([(c, "p") for c in ("full", "refused", "broken", "empty", "ok")],
                                          fetch, publish, store.scratch)}
    assert got["full"].status == ERROR
    assert "No space left" in got["full"].detail
    assert got["refused"].status == REFUSED
    assert got["broken"].status == ERROR
    assert "rate limit" in got["broken"].detail
    assert got["empty"].status == FAILED
    assert "no wheel" in got["empty"].detail
    assert got["ok"].status == PUBLISHED
    assert list(store.scratch.iterdir()) == []


def test_reports_round_trip_and_keep_the_best_verdict(tmp_path: Path) -> None:
    a, b = tmp_path / "published-0.jsonl", tmp_path / "published-0-retry.jsonl"
    a.write_text(json.dumps(CellVerdict("x", "p", ERROR, detail="disk").to_json()) + "\n")
    b.write_text(json.dumps(CellVerdict("x", "p", PUBLISHED, ("x.whl",)).to_json()) + "\n"
                 + json.dumps(CellVerdict("y", "p", FAILED).to_json()) + "\n")
    got = read_reports([a, b])
    assert got["x"].status == PUBLISHED
    assert got["x"].wheels == ("x.whl",)
    assert got["y"].status == FAILED


@pytest.mark.parametrize("line", ['{"id": "x"}', '{"id": "x", "package": "p", "status": "maybe"}', "nope"])
def test_a_broken_report_is_bad_input(tmp_path: Path, line: str) -> None:
    path = tmp_path / "published-0.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UsageError, match="published-0.jsonl:1"):
        read_reports([path])


def test_a_shard_publishes_cells_and_link_jobs_not_compile_shards() -> None:
    entries = [{"id": "a", "package": "p"}, {"id": "s", "package": "q", "shard": "0/2"},
               {"id": "s", "package": "q", "shard": "1/2"}, {"id": "l", "package": "q", "shard": "link"}]
    assert shard_cells(entries) == [("a", "p"), ("l", "q")]


# -- each artifact read as plain files only (the checks of farm.schedule.outcome.read_artifacts) --
WHEEL = "a-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl"


def hostile(secret: Path, cell: Path, how: str) -> Path:
    """A cell's artifact at ``cell`` as a hostile or broken build job could leave it after its
    download (``secret``: a folder outside it)."""
    if how == "artifact folder":
        cell.symlink_to(secret)
        return cell
    cell.mkdir()
    if how == "wheel link":
        (cell / "shadow.whl").symlink_to("/etc/shadow")
    elif how == "sub folder":
        (cell / "nested").symlink_to(secret)
    elif how == "fragment":
        (cell / "x.whl.ledger.json").symlink_to(secret / "x.whl")
    elif how == "fifo":
        os.mkfifo(cell / "x.whl")
    elif how == "oversized fragment":
        make_wheel(cell, "a", "1.0+cu128torch2.8", {"a/x.bin": b"x"})
        with open(cell / (WHEEL + ".ledger.json"), "wb") as fh:
            fh.truncate(5 << 20)  # sparse: no disk used
    elif how == "empty wheel":
        (cell / WHEEL).write_bytes(b"")
    elif how == "not a zip":
        (cell / WHEEL).write_bytes(b"<html>not found</html>")
    return cell


@pytest.mark.parametrize(("how", "status", "words"), [
    ("wheel link", REFUSED, "shadow.whl: a link (to '/etc/shadow')"),
    ("artifact folder", REFUSED, "a link"),
    ("sub folder", REFUSED, "a link"),
    ("fragment", REFUSED, "a link"),
    ("fifo", REFUSED, "not a regular file"),
    ("oversized fragment", REFUSED, "5,242,880 bytes, over the 4,194,304"),
    ("empty wheel", FAILED, "0 bytes: not a built wheel"),
    ("not a zip", FAILED, "not a zip archive: not a built wheel"),
])
def test_a_hostile_or_broken_artifact_is_its_cells_verdict_and_nothing_is_published(
        tmp_path: Path, how: str, status: str, words: str) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "x.whl").write_bytes(b"PK\x03\x04" + bytes(100))
    published: list[str] = []

    def fetch(cell_id: str, folder: Path) -> bool:
        hostile(secret, folder, how)  # what the download left: links and special files as they are
        return True

    def publish(result: CellResult) -> tuple[str, str]:
        published.append(result.id)
        return PUBLISHED, ""

    (verdict,) = publish_shard([("c", "a")], fetch, publish, tmp_path / "scratch")
    assert (verdict.status, published) == (status, [])
    assert words in verdict.detail
    assert list((tmp_path / "scratch").iterdir()) == []
