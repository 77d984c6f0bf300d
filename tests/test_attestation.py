"""Signed build provenance (:mod:`farm.publish.attestation`, ``farm attestation``).

GitHub cannot be reached from here: its attestations API and what ``actions/attest-build-provenance``
does with a ``subject-checksums`` file are simulated on 127.0.0.1 (tests/support/ghsim.py), without
the Sigstore signature, which ``gh attestation verify`` checks and farm does not. The wheels are
stamped wheels published for real to a static index: the publish writes each published wheel's
subjects (the wheel's sha256 and its ``_build_info.json``'s), the simulated action makes one
statement of them, ``farm attestation record`` notes it on each wheel's ledger line (checking each
sha256 against the ledger's), and ``farm attestation check`` reads it back and checks the statement:
an in-toto Statement v1 naming both digests, with a SLSA provenance v1 predicate of a workflow run
of the repository at a commit.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.commands.publish_shard import note_subjects
from farm.doctor.catalog import parse as parse_catalog
from farm.doctor.diagnose import diagnose
from farm.doctor.environment import Environment, Package
from farm.doctor.machine import given
from farm.provenance.buildinfo import BuildInfo, LedgerEntry
from farm.provenance.ledger import LedgerIndex
from farm.provenance.stamp import WheelName
from farm.publish.attestation import (
    MAX_SUBJECTS,
    SUBJECT_PARTS,
    append_subjects,
    read_subjects,
    statement_problems,
    subjects_part,
    wheels_of,
)
from farm.publish.indexsettings import IndexSettings
from farm.publish.ledgerpush import merge_ledgers
from farm.publish.publish import upload
from tests.support import ghsim
from tests.support.ledgermaker import make_entry
from tests.support.wheelmaker import stamped_wheel


def _run(repo: str) -> dict[str, str]:
    """A workflow run's variables, as the attest job's runner sets them."""
    return {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": repo, "GITHUB_REF": "refs/heads/main",
            "GITHUB_SHA": "a" * 40, "GITHUB_WORKFLOW_REF": f"{repo}/.github/workflows/build.yml@refs/heads/main",
            "GITHUB_EVENT_NAME": "workflow_dispatch", "GITHUB_REPOSITORY_ID": "101", "GITHUB_REPOSITORY_OWNER_ID": "7",
            "GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1"}


def _published(tmp_path: Path) -> tuple[Path, list[Path], Path]:
    """Two stamped wheels published to a static index by the real upload, their subjects written
    as a publish job writes them; the farm root (its ledger), the wheels, the subjects file."""
    out = tmp_path / "out"
    wheels = [stamped_wheel(out, make_entry(cuda="13.0", torch="none", python=py)) for py in ("cp311", "cp312")]
    root = tmp_path / "root"
    root.mkdir()
    report = upload(out, [IndexSettings("index", tmp_path / "index")], ledger=root / "ledger.jsonl", reader="native")
    assert report.ok, report.verdicts
    subjects = tmp_path / "subjects.txt"
    note_subjects(subjects, report, wheels)
    return root, wheels, subjects


def _member_sha(wheel: Path) -> tuple[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/_build_info.json"))
        return name, hashlib.sha256(zf.read(name)).hexdigest()


def _statement(sim: ghsim.GitHubSim, index: int = 0) -> dict[str, Any]:
    envelope = sim.attestations[index].bundle["dsseEnvelope"]
    assert isinstance(envelope, dict)
    statement: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return statement


@pytest.fixture
def sim() -> Any:
    with ghsim.serve(ghsim.GitHubSim()) as s:
        yield s


def test_the_published_wheels_are_attested_recorded_and_checked(tmp_path, sim, monkeypatch, capsys) -> None:
    root, wheels, subjects = _published(tmp_path)
    # each wheel and its _build_info.json, as the files published are
    expected = set()
    for wheel in wheels:
        member, member_sha = _member_sha(wheel)
        expected |= {(hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel.name),
                     (member_sha, f"{wheel.name}/{member}")}
    assert set(read_subjects(subjects)) == expected

    outputs = ghsim.attest_build_provenance(sim, subjects, _run(sim.repo))
    statement = _statement(sim)
    # the statement's format: in-toto Statement v1, the SLSA provenance v1 predicate GitHub writes
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert {(s["digest"]["sha256"], s["name"]) for s in statement["subject"]} == expected
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    definition, details = statement["predicate"]["buildDefinition"], statement["predicate"]["runDetails"]
    assert definition["buildType"] == "https://actions.github.io/buildtypes/workflow/v1"
    assert definition["externalParameters"]["workflow"] == {
        "ref": "refs/heads/main", "repository": f"https://github.com/{sim.repo}", "path": ".github/workflows/build.yml"}
    assert definition["resolvedDependencies"] == [{"uri": f"git+https://github.com/{sim.repo}@refs/heads/main",
                                                   "digest": {"gitCommit": "a" * 40}}]
    assert details["builder"]["id"] == f"https://github.com/{sim.repo}/.github/workflows/build.yml@refs/heads/main"
    assert details["metadata"]["invocationId"] == f"https://github.com/{sim.repo}/actions/runs/4242/attempts/1"

    # the ledger notes it on each wheel's line, and once only
    argv = ["attestation", "record", "--subjects", str(subjects), "--url", outputs["attestation-url"],
            "--repository", sim.repo, "--root", str(root)]
    assert main(argv) == 0
    assert "2 wheel(s) recorded as attested" in capsys.readouterr().out
    index = LedgerIndex.load(root / "ledger.jsonl")
    for wheel in wheels:
        rec = index.by_filename(wheel.name)
        assert rec is not None
        assert index.entry(rec)["attestation"] == {
            "url": outputs["attestation-url"], "repository": sim.repo,
            "workflow": f"{sim.repo}/.github/workflows/publish-shard.yml"}
    before = (root / "ledger.jsonl").read_bytes()
    assert main(argv) == 0
    assert (root / "ledger.jsonl").read_bytes() == before
    line = LedgerEntry.from_json((root / "ledger.jsonl").read_text().splitlines()[0])
    assert line.attestation == index.ledger_entry(index.by_filename(line.filename)).attestation  # type: ignore[arg-type]

    # what GitHub holds for the wheel, read back and checked
    monkeypatch.setenv("GITHUB_API_URL", sim.base.rstrip("/"))
    monkeypatch.setenv("GH_TOKEN", sim.token)
    assert main(["attestation", "check", str(wheels[0]), "--repository", sim.repo]) == 0
    out = capsys.readouterr().out
    assert f"{wheels[0].name}: attested by {sim.repo}" in out
    assert f"gh attestation verify {wheels[0]} --repo {sim.repo} --signer-workflow" in out
    never = stamped_wheel(tmp_path / "other", make_entry(cuda="13.0", torch="none", python="cp313"))
    assert main(["attestation", "check", str(never), "--repository", sim.repo]) == 1
    assert "no attestation holds its sha256" in capsys.readouterr().out


def test_a_subject_the_ledger_does_not_record_is_refused_and_the_others_recorded(tmp_path, sim, capsys) -> None:
    root, wheels, subjects = _published(tmp_path)
    lines = subjects.read_text().splitlines()
    forged = lines[0].replace(lines[0][:64], "0" * 64)  # the first wheel under other bytes
    subjects.write_text("\n".join([forged, *lines[1:]]) + "\n")
    url = ghsim.attest_build_provenance(sim, subjects, _run(sim.repo))["attestation-url"]
    assert main(["attestation", "record", "--subjects", str(subjects), "--url", url, "--repository", sim.repo,
                 "--root", str(root)]) == 1
    captured = capsys.readouterr()
    assert "1 wheel(s) recorded" in captured.out
    assert f"refused: {wheels[0].name}: the ledger records sha256" in captured.err
    index = LedgerIndex.load(root / "ledger.jsonl")
    noted = {w.name: "attestation" in index.entry(index.by_filename(w.name)) for w in wheels}  # type: ignore[arg-type]
    assert noted == {wheels[0].name: False, wheels[1].name: True}
    assert main(["attestation", "record", "--subjects", str(subjects), "--url", "https://example.org/x",
                 "--repository", sim.repo, "--root", str(root)]) == 2  # not an attestation's URL


def test_a_statement_that_names_other_bytes_or_another_kind_is_not_the_wheels(tmp_path, sim, monkeypatch,
                                                                             capsys) -> None:
    _, wheels, _ = _published(tmp_path)
    wheel, (member, member_sha) = wheels[0], _member_sha(wheels[0])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    forged = tmp_path / "forged.txt"
    forged.write_text(f"{sha}  {wheel.name}\n{'1' * 64}  {wheel.name}/{member}\n")  # another _build_info.json
    ghsim.attest_build_provenance(sim, forged, _run("someone/else"))  # and a run of another repository
    monkeypatch.setenv("GITHUB_API_URL", sim.base.rstrip("/"))
    monkeypatch.setenv("GH_TOKEN", sim.token)
    assert main(["attestation", "check", str(wheel), "--repository", sim.repo]) == 1
    out = capsys.readouterr().out
    assert f"no subject names the wheel's _build_info.json with sha256 {member_sha}" in out
    assert "not a workflow of" in out
    statement = _statement(sim)
    assert statement_problems(statement, wheel=wheel.name, sha256=sha, provenance="1" * 64,
                              repository="someone/else") == []
    statement["predicateType"] = "https://example.org/other"
    assert statement_problems(statement, wheel=wheel.name, sha256=sha, provenance="1" * 64,
                              repository="someone/else") == [
        "predicateType is 'https://example.org/other', not https://slsa.dev/provenance/v1"]
    too_many = tmp_path / "many.txt"
    too_many.write_text("".join(f"{i:064x}  w{i}.whl\n" for i in range(1025)))
    with pytest.raises(ValueError, match="more than the action's 1024"):
        ghsim.attest_build_provenance(sim, too_many, _run(sim.repo))
    assert main(["attestation", "record", "--subjects", str(too_many), "--url", "https://github.com/o/r/attestations/1",
                 "--repository", "o/r", "--root", str(tmp_path)]) == 2


def test_the_largest_waves_subjects_are_split_so_every_wheel_is_attested(tmp_path, sim) -> None:
    """A rest shard that publishes a whole wave of 2,048 wheels (every cell handed on) writes its
    subjects in files of at most 1,024 lines, a wheel's two together; the simulated action attests
    each, and every wheel and its _build_info.json are named by one statement. Left out: the wheels
    themselves (append_subjects only writes the lines subject_lines reads from a published wheel)
    and their ledger records (``farm attestation record`` of each file is the test above's)."""
    subjects = tmp_path / "subjects-rest.txt"
    subjects.touch()  # as the publish step does
    wheels = {f"w{i}.whl": f"{i:064x}" for i in range(SUBJECT_PARTS * MAX_SUBJECTS // 2)}
    for name, sha in wheels.items():
        append_subjects(subjects, [f"{sha}  {name}\n", f"{'f' * 60}{int(sha, 16):04x}  {name}/w.dist-info/x\n"])
    parts = [subjects_part(subjects, i) for i in range(SUBJECT_PARTS)]
    assert set(tmp_path.glob("subjects-rest*.txt")) == set(parts)
    assert parts[1].name == "subjects-rest-1.txt"
    assert [len(read_subjects(p)) for p in parts] == [MAX_SUBJECTS] * SUBJECT_PARTS
    urls = [ghsim.attest_build_provenance(sim, p, _run(sim.repo))["attestation-url"] for p in parts]
    assert len(set(urls)) == SUBJECT_PARTS
    named = [wheels_of(read_subjects(p)) for p in parts]
    assert {k: v for n in named for k, v in n.items()} == wheels
    assert sum(map(len, named)) == len(wheels)
    for i in range(SUBJECT_PARTS):
        names = {s["name"] for s in _statement(sim, i)["subject"]}
        assert {f"{n}/w.dist-info/x" for n in named[i]} | set(named[i]) == names


def test_a_rebase_keeps_the_attestation_one_side_recorded(tmp_path) -> None:
    """The record job and a publish job push the same wheel's line, one with the attestation: the
    ledger's merge keeps it, as it keeps every publication."""
    entry = make_entry(cuda="13.0", torch="none")
    wheel = stamped_wheel(tmp_path, entry)
    line = json.loads(Path(f"{wheel}.ledger.json").read_text())
    attested = {**line, "attestation": {"url": "https://github.com/o/r/attestations/9", "repository": "o/r",
                                        "workflow": "o/r/.github/workflows/build-shard.yml"}}
    ours = (json.dumps(attested, sort_keys=True) + "\n").encode()
    theirs = (json.dumps({**line, "published": [{"target": "index", "url": "files/x.whl"}]}) + "\n").encode()
    merged = json.loads(merge_ledgers(ours, theirs))
    assert merged["attestation"] == attested["attestation"]
    assert merged["published"] == [{"target": "index", "url": "files/x.whl"}]
    assert json.loads(merge_ledgers(theirs, ours))["attestation"] == attested["attestation"]


def test_the_compatibility_page_and_doctor_say_whether_a_wheel_is_attested(tmp_path, sim, capsys) -> None:
    root, wheels, subjects = _published(tmp_path)
    url = ghsim.attest_build_provenance(sim, subjects, _run(sim.repo))["attestation-url"]
    lines = subjects.read_text().splitlines()
    only_first = tmp_path / "first.txt"
    only_first.write_text("\n".join(line for line in lines if wheels[0].name in line) + "\n")
    assert main(["attestation", "record", "--subjects", str(only_first), "--url", url, "--repository", sim.repo,
                 "--root", str(root)]) == 0
    # the pages are made again from the ledger (as the next publish or `farm index` makes them)
    assert main(["index", str(tmp_path / "index"), "--ledger", str(root / "ledger.jsonl")]) == 0
    doc = json.loads((tmp_path / "index" / "compat" / "wheels.json").read_text())
    recs = {r["filename"]: r for r in doc["wheels"]}
    workflow = f"{sim.repo}/.github/workflows/publish-shard.yml"
    verify = f"gh attestation verify {wheels[0].name} --repo {sim.repo} --signer-workflow {workflow}"
    assert recs[wheels[0].name]["attestation"] == {"url": url, "repository": sim.repo,
                                                   "workflow": f"{sim.repo}/.github/workflows/publish-shard.yml",
                                                   "verify": verify}
    assert recs[wheels[1].name]["attestation"] is None
    page = next((tmp_path / "index" / "compat").rglob("demo-ext.html")).read_text()
    assert verify in page
    assert "not attested" in page
    # farm doctor: an installed farm wheel whose index records it attested says so, and how to check it
    # (these wheels hold no device code, so the catalogue's record gets the cell such a wheel's has)
    cell = {"cuda": "13.0", "torch": "none", "python": "cp311", "platform": "linux_x86_64", "devices": {}}
    catalog = parse_catalog({**doc, "wheels": [{**recs[wheels[0].name], **cell}]}, "https://wheels.example.org")
    info = BuildInfo.from_json(zipfile.ZipFile(wheels[0]).read(_member_sha(wheels[0])[0]))
    package = Package("demo_ext", WheelName.parse(wheels[0].name).version, str(tmp_path), info, ())
    env = Environment("python3.11", (), (package,), None, "cp311")
    d = diagnose(given([], None), env, index_url="https://wheels.example.org/",
                 catalogs={"https://wheels.example.org": catalog})
    (signed,) = [f for f in d.findings if "attested" in f.what]
    assert signed.what == f"{wheels[0].name}: attested by {sim.repo} ({url})"
    assert signed.fix is not None
    assert signed.fix.endswith(verify)
