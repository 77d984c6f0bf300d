"""The ledger pushed in small steps: a bare git remote on disk, and other writers pushing in between.

Real git throughout: a bare repository as the remote, clones as the writers; a writer whose
push is rejected (another pushed first) fetches, rebases and pushes again, conflicts in
ledger.jsonl settled by the ledger's record merge."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from farm.errors import LedgerError, ToolError
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerline import dumps_entry
from farm.publish.ledgerpush import LedgerPusher, commit_and_push, merge_ledgers
from tests.support.gitremote import append, bare_remote, clone, git, pushed_ledger
from tests.support.ledgermaker import make_entry


class NoWait:
    def now(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        pass


def line(**kw: object) -> str:
    return dumps_entry(make_entry(**kw)) + "\n"  # type: ignore[arg-type]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare remote whose main branch holds a ledger of one entry."""
    return bare_remote(tmp_path / "remote.git", line(python="cp310"))


def names(text: bytes) -> list[str]:
    return [json.loads(raw)["filename"] for raw in text.splitlines()]


def test_rejected_push_rebases_and_loses_nothing(remote: Path, tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    append(a, line(python="cp311"))
    append(b, line(python="cp312"))
    first = commit_and_push(b, b / "ledger.jsonl", "ledger: cp312", clock=NoWait())
    assert first.pushed
    assert first.attempts == 1
    # A's push is rejected (B pushed in between); both appended at the end: a conflict git
    # cannot settle, which the ledger's merge does.
    result = commit_and_push(a, a / "ledger.jsonl", "ledger: cp311", clock=NoWait())
    assert result.committed
    assert result.pushed
    assert result.attempts == 2
    assert result.rebased == 1
    assert result.merged == 1
    text = pushed_ledger(a, "ledger.jsonl")
    assert sorted(names(text)) == sorted(names(line(python=p).encode()) [0] for p in ("cp310", "cp311", "cp312"))
    # The merged file is a valid ledger, and the history is linear (no merge commits).
    (tmp_path / "check.jsonl").write_bytes(text)
    assert len(LedgerIndex.load(tmp_path / "check.jsonl")) == 3
    assert git(a, "rev-list", "--merges", "HEAD").strip() == ""


def test_same_entry_published_to_two_targets_is_a_union(remote: Path, tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    base = make_entry(python="cp310")
    (a / "ledger.jsonl").write_text(dumps_entry({**base, "published": [{"target": "github", "url": "u1"}]}) + "\n")
    (b / "ledger.jsonl").write_text(dumps_entry({**base, "published": [{"target": "index", "url": "u2"}]}) + "\n")
    commit_and_push(b, b / "ledger.jsonl", "ledger: index", clock=NoWait())
    result = commit_and_push(a, a / "ledger.jsonl", "ledger: github", clock=NoWait())
    assert result.merged == 1
    (entry,) = [json.loads(raw) for raw in pushed_ledger(a, "ledger.jsonl").splitlines()]
    assert entry["published"] == [{"target": "index", "url": "u2"}, {"target": "github", "url": "u1"}]


def test_concurrent_writers_all_land(remote: Path, tmp_path: Path) -> None:
    """Three writers push five records each, one commit per record, at the same time."""
    writers = [clone(remote, tmp_path / f"w{i}") for i in range(3)]
    errors: list[BaseException] = []

    def work(i: int, repo: Path) -> None:
        try:
            for j in range(5):
                append(repo, line(platform=f"linux_w{i}r{j}"))
                commit_and_push(repo, repo / "ledger.jsonl", f"ledger: w{i} r{j}", attempts=30, clock=NoWait())
        except BaseException as exc:  # noqa: BLE001 (reported below, from the main thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, repo)) for i, repo in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    text = pushed_ledger(writers[0], "ledger.jsonl")
    got = names(text)
    assert len(got) == len(set(got)) == 1 + 15
    assert {n for n in got if "_w" in n} == {names(line(platform=f"linux_w{i}r{j}").encode())[0]
                                             for i in range(3) for j in range(5)}


def test_two_builds_under_one_name_stop_the_push(remote: Path, tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    append(a, line(python="cp311", sha256="a" * 64))
    append(b, line(python="cp311", sha256="b" * 64))
    commit_and_push(b, b / "ledger.jsonl", "ledger: b", clock=NoWait())
    with pytest.raises(LedgerError, match="recorded with sha256 b{64} on one side and a{64}"):
        commit_and_push(a, a / "ledger.jsonl", "ledger: a", clock=NoWait())
    # Nothing lost: A's commit is still on its branch, the rebase was undone.
    assert "ledger: a" in git(a, "log", "-1", "--format=%s")
    assert not (a / ".git" / "rebase-merge").exists()


def test_a_refusal_that_is_not_a_race_is_not_retried(remote: Path, tmp_path: Path) -> None:
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch: pushes need a review' >&2\nexit 1\n")
    hook.chmod(0o755)
    a = clone(remote, tmp_path / "a")
    append(a, line(python="cp311"))
    with pytest.raises(ToolError, match="protected branch") as info:
        commit_and_push(a, a / "ledger.jsonl", "ledger: a", clock=NoWait())
    assert "kept locally" in str(info.value)
    assert "ledger: a" in git(a, "log", "-1", "--format=%s")


def test_merge_is_keyed_and_keeps_unchanged_lines() -> None:
    one, two = line(python="cp311"), line(python="cp312")
    assert merge_ledgers((one + two).encode(), (two + one).encode()) == (one + two).encode()
    assert merge_ledgers((one + one).encode(), b"") == one.encode()
    other = make_entry(python="cp311")
    other["run"] = {**other["run"], "run_id": "9"}
    with pytest.raises(LedgerError, match="different provenance"):
        merge_ledgers(one.encode(), (dumps_entry(other) + "\n").encode())


class Ticking:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def test_a_publish_shards_pusher_batches_its_records_and_loses_none(remote: Path, tmp_path: Path) -> None:
    """At most one commit and push per ``every_s``; the records between wait in the ledger file,
    and ``finish`` pushes them, rebased over another writer's push."""
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    clock = Ticking()
    pusher = LedgerPusher(a / "ledger.jsonl", "origin", every_s=60.0, clock=clock)
    pythons = ("cp311", "cp312", "cp313")
    for python in pythons:
        append(a, line(python=python))
        pusher(python)
        clock.t += 10
    assert pusher.pushes == 1  # the first record; the other two wait for the minute
    assert len(names(pushed_ledger(a, "ledger.jsonl"))) == 2
    append(b, line(python="cp39"))
    assert commit_and_push(b, b / "ledger.jsonl", "ledger: cp39", clock=NoWait()).pushed
    assert pusher.finish() is None
    assert pusher.pushes == 2
    assert sorted(names(pushed_ledger(a, "ledger.jsonl"))) == sorted(
        names(b"".join(line(python=p).encode() for p in ("cp310", "cp39", *pythons))))
    clock.t += 60
    append(a, line(python="cp38"))
    pusher("cp38")  # a minute later: pushed at once
    assert pusher.pushes == 3
