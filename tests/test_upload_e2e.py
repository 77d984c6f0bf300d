"""End to end: demo_ext built with nvcc -> postbuild -> upload to a static index served on
127.0.0.1 and to a real pypiserver -> pip install from each into a fresh venv -> import works and
``_build_info.json`` reads back through importlib.metadata. Re-uploads are no-ops; the same name
with another hash is refused before anything is sent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerfiles import ledger_location
from farm.publish.githubsettings import GithubSettings
from farm.publish.indexsettings import IndexSettings
from farm.publish.publish import upload
from farm.publish.twinesettings import TwineSettings, default_simple_url
from farm.publish.verdict import Verdict
from tests.support import ghsim
from tests.support.ledgermaker import make_entry
from tests.support.postbuildfix import Batch
from tests.support.publishfix import (
    copy_batch,
    fresh_venv,
    pip_install,
    pypiserver,
    serve_dir,
    uv_install,
    write_farm_root,
)
from tests.support.wheelmaker import stamped_wheel

CHECK = (
    "import importlib.metadata as m, json, demo_ext\n"
    "info = json.loads(m.distribution('demo_ext').read_text('_build_info.json'))\n"
    "print(json.dumps({'version': m.version('demo_ext'), 'provenance': info['provenance'],"
    " 'found': info['found'], 'has_run': hasattr(demo_ext, 'run')}))\n"
)


def installed(python: Path) -> dict[str, Any]:
    proc = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    found: dict[str, Any] = json.loads(proc.stdout)
    return found


def _ledger_entry(ledger: Path, filename: str) -> dict[str, Any]:
    index = LedgerIndex.load(ledger)
    rec = index.by_filename(filename)
    assert rec is not None
    return index.entry(rec)


def test_static_index_round_trip(demo_batch: Batch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    ledger = tmp_path / "ledger.jsonl"
    target = IndexSettings("index", tmp_path / "index", base_url=None)

    report = upload(out, [target], ledger=ledger)
    assert report.ok, report.gate.lines()
    assert report.outcomes[0].sent == (wheel.name,)
    assert report.merged == (wheel.name,)
    entry = _ledger_entry(ledger, wheel.name)
    assert entry["published"] == [{"target": "index", "url": report.outcomes[0].placed[0][1]}]
    assert entry["sha256"] == report.gate.passed[0].sha256

    server, base = serve_dir(target.path, tmp_path / "http.log")
    try:
        python = fresh_venv(tmp_path / "venv")
        proc = pip_install(python, "--index-url", f"{base}/cu130/", "demo_ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = installed(python)
        assert got["version"] == "0.1.0+cu130"
        assert got["provenance"] == "asserted"
        assert got["found"] == entry["found"]
        assert got["has_run"] is True
        # uv installs from the same channel (it checks #sha256 and reads the PEP 658 metadata).
        python_uv = fresh_venv(tmp_path / "venv-uv")
        proc = uv_install(python_uv, "--index-url", f"{base}/cu130/", "demo_ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert installed(python_uv)["version"] == "0.1.0+cu130"
        # The flat view serves pip's --find-links.
        python2 = fresh_venv(tmp_path / "venv2")
        proc = pip_install(python2, "--no-index", "--find-links", f"{base}/flat/", "demo_ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        server.stop()
    # The installers resolved from the PEP 658 metadata the pages advertise (served, hash-checked).
    log = (tmp_path / "http.log").read_text()
    assert f'"GET /files/{quote(wheel.name)}.metadata HTTP/1.1" 200' in log, log

    # A re-upload of the same batch sends nothing and leaves the ledger as it was.
    before = ledger.read_bytes()
    again = upload(out, [target], ledger=ledger)
    assert again.ok
    assert again.outcomes[0].sent == ()
    assert again.recorded == 0
    assert ledger.read_bytes() == before


def test_pypiserver_round_trip(demo_batch: Batch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    ledger = tmp_path / "ledger.jsonl"
    packages = tmp_path / "packages"
    packages.mkdir()
    server, base = pypiserver(packages, tmp_path / "pypiserver.log")
    secret = "s3cret-pass-never-shown"
    env = {"PATH": os.environ["PATH"], "TWINE_USERNAME": "farm", "TWINE_PASSWORD": secret}
    try:
        target = TwineSettings("pypi", f"{base}/", default_simple_url(f"{base}/"))
        report = upload(out, [target], ledger=ledger, env=env)
        assert report.ok, [v.line() for v in report.verdicts]
        assert report.outcomes[0].sent == (wheel.name,)
        assert (packages / wheel.name).read_bytes() == wheel.read_bytes()
        entry = _ledger_entry(ledger, wheel.name)
        (published,) = entry["published"]
        assert published["target"] == "pypi"
        assert published["url"].startswith(f"{base}/")
        assert secret not in json.dumps(entry)

        python = fresh_venv(tmp_path / "venv")
        proc = pip_install(python, "--index-url", f"{base}/simple/", "demo_ext")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        got = installed(python)
        assert got["version"] == "0.1.0+cu130"
        assert got["provenance"] == "asserted"

        # Re-upload: found in the simple API with the same sha256, so twine is not even run.
        before = ledger.read_bytes()
        again = upload(out, [target], ledger=ledger, env=env)
        assert again.ok
        assert again.outcomes[0].sent == ()
        assert again.recorded == 0
        assert ledger.read_bytes() == before
    finally:
        server.stop()


def _other_bytes(wheel: Path, dest: Path) -> None:
    """A different file under the same name (what another build would have published)."""
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dest.write_bytes(bytes(data))


def test_same_name_other_hash_refused_everywhere(demo_batch: Batch, tmp_path: Path) -> None:
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    ledger = tmp_path / "ledger.jsonl"

    # Static index: the tree already holds another file under this name, which no ledger record
    # vouches for and which fails re-assertion (a damaged copy): an orphan, left as it is.
    index_target = IndexSettings("index", tmp_path / "index")
    (index_target.path / "files").mkdir(parents=True)
    _other_bytes(wheel, index_target.path / "files" / wheel.name)
    squatter = (index_target.path / "files" / wheel.name).read_bytes()
    refused = upload(out, [index_target], ledger=ledger)
    assert not refused.ok
    (verdict,) = refused.verdicts
    assert (verdict.target, verdict.verdict) == ("index", Verdict.ORPHAN)
    assert "has no ledger record and fails re-assertion" in verdict.message
    assert (index_target.path / "files" / wheel.name).read_bytes() == squatter
    assert not (index_target.path / "packages.json").exists()
    assert not ledger.exists()

    # pypiserver: the repository already serves another file under this name.
    packages = tmp_path / "packages"
    packages.mkdir()
    _other_bytes(wheel, packages / wheel.name)
    squatter = (packages / wheel.name).read_bytes()
    server, base = pypiserver(packages, tmp_path / "pypiserver.log")
    try:
        target = TwineSettings("pypi", f"{base}/", default_simple_url(f"{base}/"))
        report = upload(out, [target], ledger=ledger, env={"TWINE_USERNAME": "u", "TWINE_PASSWORD": "p"})
        assert not report.ok
        (verdict,) = report.verdicts
        assert verdict.line().startswith(f"{wheel.name}: pypi: refused (the repository holds sha256")
        assert (packages / wheel.name).read_bytes() == squatter
        assert not ledger.exists()
    finally:
        server.stop()


def test_github_dry_run_reads_and_sends_nothing(demo_batch: Batch, tmp_path: Path) -> None:
    """Against the loopback GitHub of tests.support.ghsim (GitHub cannot be reached from here)."""
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    ledger = tmp_path / "ledger.jsonl"
    with ghsim.serve(ghsim.GitHubSim()) as sim:
        target = GithubSettings("github", sim.repo, api_url=sim.base, uploads_url=sim.base + "uploads")
        env = {"GH_TOKEN": ghsim.TOKEN}
        report = upload(out, [target], ledger=ledger, dry_run=True, env=env)
        assert report.ok
        (verdict,) = report.verdicts
        assert verdict.verdict is Verdict.WOULD_SEND
        assert verdict.url is not None
        assert wheel.name.split("+")[0] in verdict.url
        assert not ledger.exists()
        assert sim.count(content=True) == 0

        # The release already holds this exact file: nothing to send.
        tag = verdict.url.split("/")[-2]
        sim.put_asset(tag, wheel.name, wheel.read_bytes())
        again = upload(out, [target], ledger=ledger, dry_run=True, env=env)
        assert again.ok
        assert again.verdicts[0].verdict is Verdict.PRESENT
        assert sim.count(content=True) == 0
    shutil.rmtree(out)


def test_cli_publishes_to_two_targets_without_showing_credentials(
    demo_batch: Batch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from farm.cli import main
    from tests.support.publishfix import REPO

    packages = tmp_path / "packages"
    packages.mkdir()
    server, base = pypiserver(packages, tmp_path / "pypiserver.log")
    try:
        text = (REPO / "_defaults.yml").read_text()
        assert "https://pypi.example.org/" in text
        root = write_farm_root(tmp_path / "farm", text.replace("https://pypi.example.org/", f"{base}/"))
        out = tmp_path / "out"
        wheel = copy_batch(demo_batch, out)
        secret = "tok-7f3a9c-never-printed"
        monkeypatch.setenv("TWINE_USERNAME", "farm")
        monkeypatch.setenv("TWINE_PASSWORD", secret)

        # pypi first: the index then runs against a ledger the first target already rewrote.
        argv = ["upload", str(out), "--root", str(root), "--target", "pypi", "--target", "index", "--json"]
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert secret not in captured.out + captured.err
        doc = json.loads(captured.out)
        assert [(t["target"], t["sent"]) for t in doc["targets"]] == [("pypi", [wheel.name]), ("index", [wheel.name])]
        assert doc["ledger"] == {"merged": [wheel.name], "published_records_added": 2, "pushes": 0, "push_error": None}
        # the repository's index target has the wheel-variant channel on: the wheel's variant is published too
        assert [(v["target"], v["verdict"]) for v in doc["verdicts"]] == [
            ("pypi", "published"), ("index", "published"), ("index/variants", "published")]
        entry = _ledger_entry(ledger_location(root), wheel.name)
        assert [p["target"] for p in entry["published"]] == ["pypi", "index"]

        assert main(argv) == 0  # again: nothing sent, nothing recorded
        doc = json.loads(capsys.readouterr().out)
        assert [t["sent"] for t in doc["targets"]] == [[], []]
        assert doc["ledger"]["published_records_added"] == 0
    finally:
        server.stop()


def test_index_linking_to_another_targets_copies(demo_batch: Batch, tmp_path: Path) -> None:
    """An index whose pages link to the wheels on another target (as a farm links to GitHub
    release assets): here a real pypiserver. pip installs through the static pages."""
    out = tmp_path / "out"
    wheel = copy_batch(demo_batch, out)
    ledger = tmp_path / "ledger.jsonl"
    packages = tmp_path / "packages"
    packages.mkdir()
    pypi_server, pypi_base = pypiserver(packages, tmp_path / "pypiserver.log")
    env = {"TWINE_USERNAME": "u", "TWINE_PASSWORD": "p", "PATH": os.environ["PATH"]}
    try:
        pypi = TwineSettings("pypi", f"{pypi_base}/", default_simple_url(f"{pypi_base}/"))
        linked = IndexSettings("pages", tmp_path / "pages", links="pypi")

        alone = upload(out, [linked], ledger=ledger, env=env)
        assert not alone.ok
        assert not ledger.exists()
        assert [(v.target, v.verdict, v.message) for v in alone.verdicts] == [
            ("pages", Verdict.REFUSED, ("not published to 'pypi', which this index links to; "
                                       "run with --target pypi --target pages"))]

        report = upload(out, [linked, pypi], ledger=ledger, env=env)  # run order: pypi, then pages
        assert report.ok, [v.line() for v in report.verdicts]
        assert [o.target for o in report.outcomes] == ["pypi", "pages"]
        assert not (linked.path / "files").exists()
        page = (linked.path / "cu130" / "demo-ext" / "index.html").read_text()
        sha = report.gate.passed[0].sha256
        assert f'href="{pypi_base}/packages/' in page
        assert f"#sha256={sha}" in page
        entry = _ledger_entry(ledger, wheel.name)
        assert [(p["target"], p["url"]) for p in entry["published"]][1] == ("pages", "cu130/demo-ext/")

        server, base = serve_dir(linked.path, tmp_path / "http.log")
        try:
            python = fresh_venv(tmp_path / "venv")
            proc = pip_install(python, "--index-url", f"{base}/cu130/", "demo_ext")
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert installed(python)["provenance"] == "asserted"
        finally:
            server.stop()

        again = upload(out, [linked, pypi], ledger=ledger, env=env)
        assert again.ok
        assert [o.sent for o in again.outcomes] == [(), ()]
        assert again.recorded == 0

        # `farm index DIR --links pypi` rebuilds the pages from the ledger alone.
        from farm.cli import main

        (linked.path / "cu130" / "demo-ext" / "index.html").unlink()
        assert main(["index", str(linked.path), "--ledger", str(ledger), "--links", "pypi",
                     "--root", str(tmp_path)]) == 0
        assert (linked.path / "cu130" / "demo-ext" / "index.html").read_text() == page
    finally:
        pypi_server.stop()


def test_one_wheels_refusal_never_stops_anothers(tmp_path: Path) -> None:
    """Twine and an index linking to its copies, wheel by wheel (a real pypiserver on 127.0.0.1):
    the wheel whose name the repository already holds with other bytes is refused there and on the
    pages that link to it; the other wheel is sent, listed and recorded; the summary has both."""
    out = tmp_path / "out"
    squatted, good = (stamped_wheel(out, make_entry(python=py)) for py in ("cp311", "cp312"))
    ledger = tmp_path / "ledger.jsonl"
    packages = tmp_path / "packages"
    packages.mkdir()
    _other_bytes(squatted, packages / squatted.name)
    squatter = (packages / squatted.name).read_bytes()
    server, base = pypiserver(packages, tmp_path / "pypiserver.log")
    env = {"TWINE_USERNAME": "u", "TWINE_PASSWORD": "p", "PATH": os.environ["PATH"]}
    try:
        pypi = TwineSettings("pypi", f"{base}/", default_simple_url(f"{base}/"))
        pages = IndexSettings("pages", tmp_path / "pages", links="pypi")
        report = upload(out, [pages, pypi], ledger=ledger, env=env, reader="native")
    finally:
        server.stop()
    assert not report.ok
    assert report.exit_code == 1
    assert {(v.wheel, v.target): v.verdict for v in report.verdicts} == {
        (squatted.name, "pypi"): Verdict.REFUSED, (good.name, "pypi"): Verdict.PUBLISHED,
        (squatted.name, "pages"): Verdict.REFUSED, (good.name, "pages"): Verdict.PUBLISHED}
    assert (packages / squatted.name).read_bytes() == squatter
    assert (packages / good.name).read_bytes() == good.read_bytes()
    assert LedgerIndex.load(ledger).by_filename(squatted.name) is None
    assert [p["target"] for p in _ledger_entry(ledger, good.name)["published"]] == ["pypi", "pages"]
    page = (tmp_path / "pages" / "cu128" / "torch2.8" / "demo-ext" / "index.html").read_text()
    assert good.name in page
    assert squatted.name not in page


def test_the_index_recovers_a_file_whose_ledger_record_was_lost(tmp_path: Path) -> None:
    """A publish stopped between storing a wheel in the tree and recording it (here: the ledger
    lost). The cell's rebuild is published again: the same file (a reproducible build) is found
    there and recorded; other bytes (a build that is not reproducible: these wheels embed their
    run) make the stored file re-asserted and adopted, as on GitHub; a stored file that fails
    re-assertion is an orphan, named and left alone. Never a permanent block."""
    entry = make_entry(cuda="13.0", torch="none")
    first, same, other = (stamped_wheel(tmp_path / name, dict(entry), run_id=run)
                          for name, run in (("first", "1"), ("same", "1"), ("other", "2")))
    assert first.read_bytes() == same.read_bytes() != other.read_bytes()
    target = IndexSettings("index", tmp_path / "index")
    stored = target.path / "files" / first.name
    ledger = tmp_path / "ledger.jsonl"

    def publish(wheel: Path, **options: Any) -> dict[str, Verdict]:
        report = upload(wheel.parent, [target], ledger=ledger, reader="native", **options)
        return {v.target: v.verdict for v in report.verdicts}

    def recorded() -> str | None:
        rec = LedgerIndex.load(ledger).by_filename(first.name) if ledger.exists() else None
        return rec.sha256 if rec is not None else None

    first_sha = _sha256(first)
    assert publish(first) == {"index": Verdict.PUBLISHED}
    ledger.unlink()  # the record is lost
    assert publish(same) == {"index": Verdict.PRESENT}
    assert recorded() == first_sha
    ledger.unlink()
    assert publish(other, dry_run=True) == {"index": Verdict.WOULD_VERIFY}
    assert publish(other) == {"index": Verdict.ADOPTED}
    assert recorded() == first_sha  # the stored file's record, not the rebuild's
    assert [p["target"] for p in _ledger_entry(ledger, first.name)["published"]] == ["index"]
    assert stored.read_bytes() == first.read_bytes()
    listed = json.loads((target.path / "packages.json").read_text())["files"][first.name]
    assert listed["sha256"] == first_sha
    assert publish(other) == {"gate": Verdict.REFUSED}  # now recorded: the other build is refused at the gate
    ledger.unlink()
    stored.write_bytes(b"not a wheel")  # damaged: it cannot be read, let alone re-asserted
    squatter = stored.read_bytes()
    report = upload(other.parent, [target], ledger=ledger, reader="native")
    (verdict,) = report.verdicts
    assert verdict.verdict is Verdict.ORPHAN
    assert f"delete {stored}" in verdict.message
    assert stored.read_bytes() == squatter
    assert recorded() is None


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
