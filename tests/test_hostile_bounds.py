"""Hostile input beside tests/test_hostile.py: every read bounded, every case exit 2 or 3 with a
message naming what was refused, no traceback, and nothing outside the test's scratch folder
changed (:func:`untouched`)."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from farm import cacheseal
from farm.cli import main
from farm.errors import LedgerError
from farm.fsutil import remove
from farm.model.config import PathSource
from farm.publish.ghrest import Client, GithubApiError, GithubRelease, RemoteAsset
from farm.schedule.stream import PUBLISHED, CellVerdict
from farm.source.fetch import fetch
from tests.support import loopback
from tests.support.buildroot import DEMO_RECIPE, make_root
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


# ------------------------------------------------------------------------------ the GitHub client
# GitHub cannot be reached from here: a server on 127.0.0.1 answers as GitHub's REST API does in
# form (status, headers, JSON) but with what a broken proxy, a hostile GitHub Enterprise Server or a
# man in the middle could send. Left out: TLS (the client's https handling is urllib's).
class Hostile(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``answer(path)``: (status, headers, body, seconds between bytes)."""

    answer: ClassVar[Callable[[str], tuple[int, dict[str, str], bytes, float]]]

    def do_GET(self) -> None:
        status, headers, body, pause = type(self).answer(self.path)
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        try:
            for i in range(0, len(body), 1 if pause else len(body) or 1):
                self.wfile.write(body[i:i + (1 if pause else len(body))])
                self.wfile.flush()
                time.sleep(pause)
        except OSError:  # the client hung up (its deadline)
            pass

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def hostile_github(answer: Callable[[str], tuple[int, dict[str, str], bytes, float]]) -> Iterator[Client]:
    handler = type("Handler", (Hostile,), {"answer": staticmethod(answer)})
    with loopback.serve(handler=handler) as base:
        yield Client("o/r", "t0ken", api_url=base.rstrip("/"), uploads_url=base + "uploads", max_retries=1,
                     deadline_s=3.0)


@pytest.mark.parametrize(("body", "words"), [
    (b"[1, 2]", "GitHub answered release v1 with [1, 2], not an object"),
    (b"{}", "GitHub answered release v1 with id = null, not a number >= 0"),
    (b'{"id": "abc"}', 'GitHub answered release v1 with id = "abc", not a number >= 0'),
    (b'{"id": -3}', "GitHub answered release v1 with id = -3, not a number >= 0"),
    (b'{"id": ' + b"9" * 100_000 + b"}", "number of 100,000 characters"),
    (DEEP, "nest deeper"),
], ids=["list", "empty", "id-text", "id-negative", "digits", "deep"])
def test_a_release_answer_outside_githubs_schema_is_refused(body: bytes, words: str) -> None:
    with hostile_github(lambda _path: (200, {}, body, 0.0)) as client, pytest.raises(GithubApiError) as caught:
        client.release("v1")
    assert words in str(caught.value)


def test_an_asset_listing_that_never_ends_stops_at_githubs_limit() -> None:
    """A release holds at most 1,000 assets: a listing whose every page is full is cut after 11 pages."""
    page = json.dumps([{"id": i, "name": f"a{i}.whl", "size": 1} for i in range(100)]).encode()
    with hostile_github(lambda _path: (200, {}, page, 0.0)) as client, pytest.raises(GithubApiError) as caught:
        client.assets(GithubRelease(7, "v1"))
    assert "more than 11 pages of 100, where a release holds at most 1,000 assets" in str(caught.value)
    assert client.requests == 11
    assert caught.value.exit_code == 3


def test_an_answer_trickled_a_byte_at_a_time_ends_at_the_requests_deadline() -> None:
    started = time.monotonic()
    with hostile_github(lambda _path: (200, {}, b'{"id": 1234567890}', 0.5)) as client, \
            pytest.raises(GithubApiError, match=r"did not finish within 3 s \(a stalled or trickling server\)"):
        client.release("v1")
    assert time.monotonic() - started < 20  # one deadline, not one per retry


@pytest.mark.parametrize("location", ["file:///etc/passwd", "http://example.invalid/storage/x", "ftp://h/x"])
def test_a_download_redirected_elsewhere_than_https_is_refused(tmp_path: Path, location: str) -> None:
    with hostile_github(lambda _path: (302, {"Location": location}, b"", 0.0)) as client, \
            pytest.raises(GithubApiError, match="only an https location"):
        client.download(RemoteAsset(1, "a.whl", 10, None), tmp_path / "a.whl", max_bytes=100)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("url", ["::::", "ftp://api.github.com", "http://api.github.com", "https://"])
def test_an_api_url_that_is_not_githubs_is_bad_input(tmp_path: Path, capsys, monkeypatch, url: str) -> None:
    """`GITHUB_API_URL=::::` was a traceback; plain http to another machine would send the token in clear."""
    plan = tmp_path / "plan.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["matrix", "torch_scatter", "--root", str(REPO), "--no-lint", "--cuda", "12.8", "--torch", "2.8",
                     "--platform", "linux_x86_64", "--max-shards", "8", "--plan", str(plan)]) == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_API_URL", url)
    monkeypatch.setenv("GH_TOKEN", "t0ken")
    with untouched(tmp_path):
        refused(farm(capsys, "publish-shard", "--plan", str(plan), "--shard", "0", "--run-id", "1",
                     "--repository", "o/r", "--report", str(tmp_path / "r.jsonl"), "--root", str(REPO)), 2,
                "is not an https URL of GitHub's API")


# ------------------------------------------------------------------------------------- farm doctor
def _python_of(tmp_path: Path, site: Path) -> Path:
    """An interpreter that answers doctor's one question (sys.path and tag) with ``site``."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho '[[\"{site}\"], \"cp311\"]'\n")
    python.chmod(0o755)
    return python


def _dist(site: Path, name: str, files: dict[str, bytes | str]) -> Path:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    for rel, content in files.items():
        if isinstance(content, str) and content.startswith("->"):
            (info / rel).symlink_to(content[2:])
        else:
            (info / rel).write_bytes(content if isinstance(content, bytes) else content.encode())
    return info


def test_doctor_reads_an_environments_files_bounded_and_only_inside_it(tmp_path: Path, capsys) -> None:
    """An installed distribution's files are anyone's: a _build_info.json made a link to /dev/zero
    (read until memory ran out), one that is not UTF-8, a METADATA that is not UTF-8 (tracebacks), a
    RECORD naming files outside the environment (doctor printed their first bytes)."""
    outside = tmp_path / "secret.so"
    outside.write_text("the first bytes of a file outside the environment")
    site = tmp_path / "site"
    meta = "Metadata-Version: 2.1\nName: {}\nVersion: 1.0\n"
    _dist(site, "zero", {"METADATA": meta.format("zero"), "_build_info.json": "->/dev/zero", "RECORD": ""})
    _dist(site, "latin", {"METADATA": meta.format("latin"), "_build_info.json": b'{"x": "\xe9"}', "RECORD": ""})
    _dist(site, "garbled", {"METADATA": b"Name: \xff\xfe\n", "RECORD": ""})
    escape = f"../{outside.name},,\n{outside},,\n../../../../..{outside}.cpython-311-x86_64-linux-gnu.so,,\n"
    _dist(site, "escape", {"METADATA": meta.format("escape"), "RECORD": escape,
                           "_build_info.json": json.dumps({"extensions": {"../secret.so": "0" * 64}})})
    python = _python_of(tmp_path, site)
    with untouched(tmp_path):
        rc = main(["doctor", "--python", str(python), "--device", "9.0", "--driver", "580.65.06"])
        out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert "Traceback" not in out + err
    assert "the first bytes" not in out + err
    assert "_build_info.json unreadable" in out, out
    assert "not a regular file" in out, out
    assert "not UTF-8" in out, out
    assert "unreadable: " in out, out  # the garbled METADATA: listed as unreadable, the rest still checked


def test_doctor_stops_reading_a_python_or_nvidia_smi_that_prints_without_end(tmp_path: Path, capsys,
                                                                             monkeypatch) -> None:
    """A --python whose answer is 2 GB, an nvidia-smi printing 3 GB: read up to a megabyte, then stopped."""
    endless = tmp_path / "endless"
    endless.write_text("#!/bin/sh\nexec yes '[[\"/x\"], \"cp311\"]'\n")
    endless.chmod(0o755)
    started = time.monotonic()
    with untouched(tmp_path):
        refused(farm(capsys, "doctor", "--python", str(endless), "--device", "9.0", "--driver", "580.65.06"), 2,
                "printed more than 1 MiB where an interpreter prints its sys.path")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(endless)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr("farm.doctor.machine._nvml", lambda: "nvml: none here")
    monkeypatch.setattr("farm.doctor.machine._libcuda", lambda: "libcuda: none here")
    python = _python_of(tmp_path, tmp_path / "site")
    with untouched(tmp_path):
        rc = main(["doctor", "--python", str(python), "--json"])
        out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert "nvidia-smi printed more than 1 MiB: not read further" in out, out
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(("content", "words"), [
    (DEEP, "nest deeper"), (b'{"schema_version": ' + b"1" * 100_000 + b"}", "number of 100,000 characters"),
    (b"\xff{}", "not UTF-8")], ids=["deep", "digits", "not-utf8"])
def test_a_hostile_compatibility_catalogue_is_said_not_believed(tmp_path: Path, capsys, content: bytes,
                                                                words: str) -> None:
    index = tmp_path / "index"
    (index / "compat").mkdir(parents=True)
    (index / "compat" / "wheels.json").write_bytes(content)
    python = _python_of(tmp_path, tmp_path / "site")
    with untouched(tmp_path):
        rc = main(["doctor", "--python", str(python), "--device", "9.0",
                   "--driver", "580.65.06", "--index-url", str(index)])
        out, err = capsys.readouterr()
    assert rc in (0, 1), err
    assert "Traceback" not in out + err
    assert words in out + err, out + err


# ---------------------------------------------------------------------------- the cache key
def test_the_key_package_code_could_read_is_retired_when_it_has_run(tmp_path: Path, monkeypatch) -> None:
    """A native build's package code runs as this user and can read the key file: once it has run
    (cacheseal.retiring), the file holds a new key, so an entry it sealed with the old one (a lint
    answer with its findings emptied, say) never verifies. A link or a FIFO planted at the key's
    path is never read through, and the new key replaces the link itself."""
    key = tmp_path / "config" / "cache.key"
    monkeypatch.setenv(cacheseal.KEY_FILE_ENV, str(key))
    monkeypatch.delenv(cacheseal.KEY_ENV, raising=False)
    sealed = cacheseal.seal(b"an answer", "lint:k")
    kept, changed = tmp_path / "kept.json", tmp_path / "changed.json"
    cacheseal.write(kept, b"what this process wrote", "lint:kept")
    cacheseal.write(changed, b"what this process wrote", "lint:changed")
    with cacheseal.retiring():
        stolen = key.read_bytes()  # what the package's setup.py could read
        forged = cacheseal.seal(b"a forged answer", "lint:k")
        changed.write_bytes(cacheseal.seal(b"a forged answer", "lint:changed"))  # with the key it read
    assert key.read_bytes() != stolen
    assert cacheseal.unseal(forged, "lint:k") is None
    assert cacheseal.unseal(sealed, "lint:k") is None  # an entry farm never read here: recomputed, time only
    assert cacheseal.read(kept, "lint:kept", 1 << 20) == b"what this process wrote"  # sealed again, from memory
    assert cacheseal.read(changed, "lint:changed", 1 << 20) is None  # changed meanwhile: never sealed again
    assert key.stat().st_mode & 0o777 == 0o600
    elsewhere = tmp_path / "known.key"
    elsewhere.write_bytes(b"k" * 32)  # a key the planter knows
    key.unlink()
    key.symlink_to(elsewhere)
    planted = cacheseal._MAGIC + cacheseal._tag(b"k" * 32, "p", b"x") + b"x"  # sealed with the planted key
    assert cacheseal.unseal(planted, "p") is None  # a key read through a link is not farm's
    cacheseal.retire_key()
    assert not key.is_symlink()
    assert elsewhere.read_bytes() == b"k" * 32
    key.unlink()
    os.mkfifo(key)
    started = time.monotonic()
    assert cacheseal.unseal(cacheseal.seal(b"x", "p"), "p") == b"x"  # this process's own key: no hang
    assert time.monotonic() - started < 5


def test_a_build_that_runs_package_code_here_refuses_the_key_in_farms_environment(tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    """`FARM_CACHE_KEY` in farm's own environment is readable to a native build's setup.py
    (/proc/PID/environ): the build is refused before anything is fetched; a build step's
    environment never carries it."""
    from farm.builder.builders import passed_on

    monkeypatch.setenv(cacheseal.KEY_ENV, "s3cret")
    assert cacheseal.KEY_ENV not in passed_on(dict(os.environ))
    root = tmp_path / "root"
    make_root(root, {"demo_ext": DEMO_RECIPE.format(arch="8.0")}, {"examples/demo_ext": REPO / "examples/demo_ext"})
    with untouched(tmp_path):
        refused(farm(capsys, "build", "demo_ext", "--builder", "native", "--cuda", "13.0", "--root", str(root),
                     "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")), 2,
                "$FARM_CACHE_KEY is set, and the package code of demo_ext", "unset FARM_CACHE_KEY")


# ------------------------------------------------------------------------------- the ledger
def test_a_torn_last_ledger_line_is_removed_by_the_next_publish(tmp_path: Path, capsys) -> None:
    """A publish killed mid-append left half a line: every later publish refused the ledger until
    the line was removed by hand. The next book removes it (saying so); the lines before stay."""
    from farm.provenance.ledgerbook import LedgerBook
    from tests.support.ledgermaker import make_entry

    ledger = tmp_path / "ledger.jsonl"
    whole = json.dumps(make_entry("a", "1.0")) + "\n"
    ledger.write_text(whole + json.dumps(make_entry("b", "1.0"))[:57])
    book = LedgerBook.open(ledger)
    assert len(book) == 1
    assert ledger.read_text() == whole
    assert "removed an incomplete last line" in capsys.readouterr().err
    # a complete last line without its newline is a record, and a bad line in the middle still stops the reader
    ledger.write_text(whole + json.dumps(make_entry("b", "1.0")))
    assert len(LedgerBook.open(ledger)) == 2
    ledger.write_text(whole + "{torn\n" + whole.replace('"a"', '"c"'))
    with pytest.raises(LedgerError):
        LedgerBook.open(ledger)


def test_an_immutable_lint_cache_costs_time_never_the_answer(tmp_path: Path, capsys) -> None:
    """`chattr +i` on the lint cache folder made `farm lint` exit 3; a cache is never a failure."""
    cache = tmp_path / "cache"
    (cache / "lint").mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(cache / "lint")], capture_output=True, check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        tree = REPO / "examples" / "demo_ext"
        rc, err = farm(capsys, "lint", str(tree), "--arch-list", "8.0", "--cache-dir", str(cache))
    finally:
        subprocess.run(["chattr", "-i", str(cache / "lint")], check=True)
    assert rc == 0, err
    assert "Traceback" not in err


THIEF_RECIPE = """\
name: thief
version: '0.1.0'
source:
  path: src/thief
links_torch: false
arch:
  list: '8.0'
"""
# setup.py of a package that reads farm's key file, as its code can on this host, and leaves a copy
THIEF_SETUP = """\
import os, shutil
from setuptools import setup
if os.environ.get("THIEF_LOOT"):
    shutil.copyfile(os.environ["FARM_KEY_FILE"], os.environ["THIEF_LOOT"])
setup(name="thief", version="0.1.0", py_modules=[])
"""


def test_a_key_a_native_builds_package_code_read_seals_nothing_after_it(tmp_path: Path, cuda_home: Path) -> None:
    """The real `farm build --builder native` of a package whose setup.py copies the key file: the
    copy seals nothing farm believes once the build's step has ended (a lint answer with its
    findings emptied, resealed with it, was believed before)."""
    src = tmp_path / "thief"
    src.mkdir()
    (src / "setup.py").write_text(THIEF_SETUP)
    root = tmp_path / "root"
    make_root(root, {"thief": THIEF_RECIPE}, {"src/thief": src})
    loot = tmp_path / "loot"
    cacheseal.seal(b"x", "p")  # the key file exists before the build, as on a maintainer's host
    subprocess.run([sys.executable, "-m", "farm.cli", "build", "thief", "--builder", "native", "--cuda", "13.0",
                    "--root", str(root), "--cache-dir", str(tmp_path / "cache"), "--cuda-home", str(cuda_home),
                    "--out", str(tmp_path / "out")], env={**os.environ, "THIEF_LOOT": str(loot)},
                   capture_output=True, text=True, timeout=1800, check=False)
    stolen = loot.read_bytes()
    assert len(stolen) == 32
    assert Path(cacheseal.key_file()).read_bytes() != stolen
    forged = cacheseal._MAGIC + cacheseal._tag(stolen, "lint:any", b"{}") + b"{}"
    assert cacheseal.unseal(forged, "lint:any") is None


@pytest.mark.parametrize("kind", ["link-to-folder", "link-to-file", "folder", "file", "absent"])
def test_a_cleanup_removes_what_is_there_never_what_a_link_names(tmp_path: Path, kind: str) -> None:
    """fsutil.remove, which every cleanup of farm's folders goes through (a build's source copy and
    dist folder, a publish's scratch folder, a probe's objects): a link there is removed, its target
    never touched (shutil.rmtree refused a link with a traceback; a followed one emptied the target)."""
    victim = tmp_path / "V"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    path = tmp_path / "farms" / "src"
    path.parent.mkdir()
    if kind == "link-to-folder":
        path.symlink_to(victim, target_is_directory=True)
    elif kind == "link-to-file":
        path.symlink_to(victim / "precious.txt")
    elif kind == "folder":
        (path / "sub").mkdir(parents=True)
        (path / "sub" / "back").symlink_to(victim, target_is_directory=True)
    elif kind == "file":
        path.write_text("x")
    with untouched(victim):
        remove(path)
    assert not path.exists()
    assert not path.is_symlink()
