"""Hostile input beside tests/test_hostile.py: every read bounded, every case exit 2 or 3 with a
message naming what was refused, no traceback, and nothing outside the test's scratch folder
changed (:func:`untouched`)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.cli import main
from farm.model.config import PathSource
from farm.schedule.stream import PUBLISHED, CellVerdict
from farm.source.fetch import fetch
from tests.support import loopback
from tests.support.buildroot import make_root
from tests.test_hostile import DEEP, farm, refused
from tests.test_waves import CELLS, plan_of

REPO = Path(__file__).resolve().parent.parent


# what a farm command run from the checkout could change there: its ledger, configuration and recipes
CHECKOUT = [REPO / "ledger.jsonl", REPO / "_defaults.yml", REPO / "packages"]


def _listing(roots: list[Path]) -> dict[str, tuple[int, int, int]]:
    out = {}
    for root in roots:
        for path in [root, *(root.rglob("*") if root.is_dir() and not root.is_symlink() else [])]:
            with contextlib.suppress(OSError):
                st = path.lstat()
                out[str(path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@contextlib.contextmanager
def untouched(*roots: Path) -> Iterator[None]:
    """Nothing under ``roots`` (the test's own inputs) nor in the checkout is added, removed or changed."""
    watched = [*roots, *CHECKOUT]
    before = _listing(watched)
    yield
    assert _listing(watched) == before


# ------------------------------------------------------------------------------- wave reports
def _wave(tmp_path: Path, line: bytes | None = None) -> tuple[Path, Path]:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of(CELLS, deferred=0)))
    reports = tmp_path / "reports"
    reports.mkdir()
    if line is not None:
        (reports / "published-0.jsonl").write_bytes(line + b"\n")
    return plan, reports


def _verdict(**changes: object) -> bytes:
    data = {**CellVerdict(CELLS[0][0], "a", PUBLISHED, ("a.whl",)).to_json(), **changes}
    return json.dumps(data).encode()


@pytest.mark.parametrize(("line", "words"), [
    (DEEP, ["published-0.jsonl:1", "nest deeper"]),
    (b'{"id": "x", "package": "a", "status": "published", "artifact_bytes": ' + b"1" * 100_000 + b"}",
     ["published-0.jsonl:1", "number of 100,000 characters"]),
    (_verdict(wheels="abc"), ["published-0.jsonl:1", 'wheels must be a list of file names, not "abc"']),
    (_verdict(wheels=[1, 2]), ["published-0.jsonl:1", "wheels must be a list"]),
    (b"\xff\xfe{}", ["published-0.jsonl", "cannot read the publish report"]),
], ids=["deep", "digits", "wheels-a-string", "wheels-numbers", "not-utf8"])
def test_a_hostile_publish_report_is_bad_input(tmp_path: Path, capsys, line: bytes, words: list[str]) -> None:
    plan, reports = _wave(tmp_path, line)
    with untouched(tmp_path):
        refused(farm(capsys, "wave", "--plan", str(plan), "--reports", str(reports)), 2, *words)


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_publish_report_that_never_ends_is_refused_before_it_is_read(tmp_path: Path, capsys, kind: str) -> None:
    plan, reports = _wave(tmp_path)
    report = reports / "published-0.jsonl"
    if kind == "device":
        report.symlink_to("/dev/zero")
    else:
        os.mkfifo(report)
    with untouched(tmp_path):
        refused(farm(capsys, "wave", "--plan", str(plan), "--reports", str(reports)), 2, "published-0.jsonl",
                "not a regular file")


def test_reports_that_are_not_a_folder_are_bad_input(tmp_path: Path, capsys) -> None:
    plan, _ = _wave(tmp_path)
    with untouched(tmp_path):
        refused(farm(capsys, "wave", "--plan", str(plan), "--reports", "/dev/zero"), 2,
                "--reports /dev/zero: not a folder")


# ------------------------------------------------------------------ links out of farm's folders
def _victim(tmp_path: Path) -> Path:
    """A folder of the user's, outside the cache, laid out like a cache's entries (a toolkit line,
    environments, sources, work folders: each an old, unused one the prune would remove)."""
    victim = tmp_path / "V"
    for sub in ("pypi-12.0-old", "py3.9-torchnone-0000000000000000", "0" * 40, "old-1.0-cu128-notorch-cp39-x"):
        (victim / sub).mkdir(parents=True)
        (victim / sub / "precious.txt").write_text("mine")
    old = 1_000_000_000.0
    for path in [victim, *victim.rglob("*")]:
        os.utime(path, (old, old), follow_symlinks=False)
    return victim


@pytest.mark.parametrize("linked", ["build", "envs", "toolkit/12.0", "sources/git", "sources", "toolkit"])
def test_cache_prune_never_follows_a_link_out_of_the_cache(tmp_path: Path, capsys, linked: str) -> None:
    """`ln -s $PWD/V C/build && farm cache prune --cache-dir C --min-age 0` emptied V; a link on
    the way is now left as it stands and said so."""
    root = tmp_path / "root"
    make_root(root, {})
    cache = tmp_path / "C"
    (cache / linked).parent.mkdir(parents=True, exist_ok=True)
    (cache / "envs" if linked != "envs" else cache / "build").mkdir(exist_ok=True)  # a farm cache's layout
    victim = _victim(tmp_path)
    (cache / linked).symlink_to(victim, target_is_directory=True)
    with untouched(victim, root):
        rc = main(["cache", "prune", "--root", str(root), "--cache-dir", str(cache), "--min-age", "0"])
        out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"{cache / linked} (a link: farm removes nothing it reaches through one)" in out, out
    assert (cache / linked).is_symlink()


@pytest.mark.parametrize("age", ["nan", "-1", "inf", "-inf"])
def test_the_prunes_min_age_is_a_finite_number_of_seconds(tmp_path: Path, capsys, age: str) -> None:
    root = tmp_path / "root"
    make_root(root, {})
    cache = tmp_path / "C"
    (cache / "build" / "x").mkdir(parents=True)
    with untouched(tmp_path):
        refused(farm(capsys, "cache", "prune", "--root", str(root), "--cache-dir", str(cache), f"--min-age={age}"),
                2, "--min-age must be finite numbers >= 0")


@pytest.mark.parametrize("kind", ["home", "missing"])
def test_a_cache_dir_that_is_not_a_farm_cache_is_refused(tmp_path: Path, capsys, kind: str) -> None:
    """A folder of the user's that happens to have a build/ (a project): the prune would have
    removed its every subfolder."""
    root = tmp_path / "root"
    make_root(root, {})
    home = tmp_path / "project"
    if kind == "home":
        (home / "build" / "obj").mkdir(parents=True)
        (home / "src").mkdir()
    with untouched(tmp_path):
        refused(farm(capsys, "cache", "prune", "--root", str(root), "--cache-dir", str(home), "--min-age", "0"), 2,
                str(home), "not a farm cache" if kind == "home" else "no such folder")


def test_a_linked_vendor_archive_folder_is_replaced_never_followed(tmp_path: Path) -> None:
    """The per-archive folder of the vendor cache made a link to a folder of the user's: farm
    deleted a file there (its bytes were not the pin's) and wrote the download into it. Now the
    link itself is removed and a folder of farm's made in its place."""
    from tests.test_sources_vendor import GLM, _entry, _put, _tar

    upstream_root = tmp_path / "pkg"
    (upstream_root / "csrc" / "third_party" / "glm").mkdir(parents=True)
    (upstream_root / "setup.py").write_text("# pkg\n")
    served = tmp_path / "served"
    served.mkdir()
    victim = tmp_path / "V"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    cache = tmp_path / "cache"
    with loopback.serve(served) as url_base:
        url, sha = _put((served, url_base), "glm.tar.gz", _tar(GLM))
        (cache / "vendor").mkdir(parents=True)
        (cache / "vendor" / sha).symlink_to(victim, target_is_directory=True)
        with untouched(victim):
            tree = fetch(PathSource(upstream_root, "pkg"), cache, vendor=(_entry(url, sha),))
    assert (tree.root / "csrc/third_party/glm/glm/glm.hpp").is_file()
    assert not (cache / "vendor" / sha).is_symlink()
    assert [p.name for p in (cache / "vendor" / sha).iterdir()] == ["glm.tar.gz"]
