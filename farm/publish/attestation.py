"""Signed build provenance for published wheels: GitHub's artifact attestations.

A publish job writes, for each wheel it published, two subjects in the checksums format
``actions/attest-build-provenance`` reads (``sha256  name``): the wheel, and its
``_build_info.json`` named ``<wheel>/<dist-info>/_build_info.json``, both read from the file it
published (:func:`subject_lines`). A job that runs no package code attests them: GitHub signs (through
Sigstore, with the job's OIDC identity) one in-toto Statement v1 naming them, whose predicate is a SLSA
provenance v1 of the workflow run, and stores it on the repository. The ledger then records its
reference on each wheel's line (:class:`~farm.provenance.buildinfo.Attestation`), checked against
the ledger's own sha256 of the wheel. :func:`statement_problems` checks a statement as
``farm attestation check`` reads it back from GitHub's attestations API; the signature itself is
``gh attestation verify``'s to check (docs/attestations.md).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.binary.wheelfile import SafeWheel
from farm.errors import UsageError
from farm.fsutil import sha256_file
from farm.provenance.buildinfo import BUILD_INFO_NAME, Attestation

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://actions.github.io/buildtypes/workflow/v1"  # GitHub Actions' workflow build type
PAYLOAD_TYPE = "application/vnd.in-toto+json"  # the DSSE envelope's payload
SIGNER_WORKFLOW = ".github/workflows/publish-shard.yml"  # the reusable workflow whose jobs attest
MAX_SUBJECTS = 1024  # actions/attest-build-provenance's cap on one statement's subjects
# The subjects files one publish job writes, each one attestation of publish-shard.yml's attest job:
# the largest wave (build.yml's --max-shards 8 x 256 cells, a wheel each) all handed on to the rest
# shard is 2,048 wheels, 4,096 subjects.
SUBJECT_PARTS = 4
_LINE = re.compile(r"(?P<sha>[0-9a-f]{64}) [ *](?P<name>[^\s/][^\n]*\S)")
_MAX_SUBJECTS_FILE = 4 << 20


def member_of(wheel: Path) -> str:
    """The archive path of the wheel's ``_build_info.json``; a :class:`UsageError` when it has none."""
    with SafeWheel(wheel) as zf:
        member = f"{zf.dist_info()}/{BUILD_INFO_NAME}"
        if member not in zf.names():
            raise UsageError(f"{wheel.name} carries no {BUILD_INFO_NAME}: never stamped by farm", where=str(wheel))
        return member


def subject_lines(wheel: Path) -> list[str]:
    """The wheel's two subjects, as lines of a checksums file: the wheel, and its ``_build_info.json``."""
    member = member_of(wheel)
    return [f"{sha256_file(wheel)}  {wheel.name}\n", f"{provenance_sha256(wheel)}  {wheel.name}/{member}\n"]


def subjects_part(path: Path, part: int) -> Path:
    """Part ``part`` of the subjects ``path`` names: ``path`` itself, then ``NAME-1.txt``, ``NAME-2.txt``, ..."""
    return path if part == 0 else path.with_name(f"{path.stem}-{part}{path.suffix}")


def append_subjects(path: Path, lines: Sequence[str]) -> None:
    """Append one wheel's subject lines to the last part of ``path``, or to a new part when they would
    take it past :data:`MAX_SUBJECTS` (a wheel's subjects stay in one attestation)."""
    part = 0
    while subjects_part(path, part + 1).exists():
        part += 1
    last = subjects_part(path, part)
    if last.exists() and len(last.read_text(encoding="utf-8").splitlines()) + len(lines) > MAX_SUBJECTS:
        last = subjects_part(path, part + 1)
    with open(last, "a", encoding="utf-8") as out:
        out.writelines(lines)


def read_subjects(path: Path) -> list[tuple[str, str]]:
    """(sha256, name) of each line of a checksums file farm wrote (bounded; a malformed line is refused)."""
    if path.stat().st_size > _MAX_SUBJECTS_FILE:
        raise UsageError(f"more than {_MAX_SUBJECTS_FILE >> 20} MiB of subjects", where=str(path))
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            raise UsageError(f"not a checksums line: {line[:120]!r}", where=f"{path}:{number}",
                             hint="pass the subjects file `farm publish-shard --subjects` wrote")
        out.append((m["sha"], m["name"]))
    if len(out) > MAX_SUBJECTS:
        raise UsageError(f"{len(out)} subjects, more than the {MAX_SUBJECTS} one attestation may name", where=str(path),
                         hint="pass one subjects file `farm publish-shard --subjects` wrote: it starts a new "
                              "file past that many")
    return out


def wheels_of(subjects: Iterable[tuple[str, str]]) -> dict[str, str]:
    """wheel file name -> sha256, from the subjects (the ``_build_info.json`` subjects left out)."""
    return {name: sha for sha, name in subjects if name.endswith(".whl") and "/" not in name}


def reference(url: str, repository: str, workflow: str = SIGNER_WORKFLOW) -> Attestation:
    """The ledger's record of an attestation (its page, the repository, the signing workflow)."""
    if not re.fullmatch(r"https://[^\s]+/attestations/\d+", url):
        raise UsageError(f"{url!r} is not an attestation's URL (https://github.com/OWNER/REPO/attestations/ID)",
                         hint="pass the attest step's attestation-url output")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repository):
        raise UsageError(f"{repository!r} is not OWNER/REPO")
    return Attestation(url, repository, f"{repository}/{workflow}")


def verify_command(wheel: str, attestation: Attestation) -> str:
    """The command that checks the statement's signature (farm checks what it says, not who signed it)."""
    return f"gh attestation verify {wheel} --repo {attestation.repository} --signer-workflow {attestation.workflow}"


def statement_of(bundle: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """The in-toto statement a Sigstore bundle's DSSE envelope carries (decoded, bounded); a
    :class:`UsageError` naming ``where`` when the bundle holds none."""
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, Mapping) or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise UsageError(f"not a DSSE envelope of an in-toto statement ({PAYLOAD_TYPE})", where=where)
    try:
        payload = base64.b64decode(str(envelope.get("payload", "")), validate=True)
        statement = jsonread.loads(payload)
    except (binascii.Error, ValueError) as exc:
        raise UsageError(f"the envelope's payload is not a statement: {exc}", where=where) from None
    if not isinstance(statement, dict):
        raise UsageError("the envelope's payload is not a JSON object", where=where)
    return statement


def _at(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def statement_problems(statement: Mapping[str, Any], *, wheel: str, sha256: str, provenance: str | None,
                       repository: str) -> list[str]:
    """What a statement gets wrong for this wheel (empty: it names the wheel's sha256 and its
    ``_build_info.json``'s, and is the SLSA provenance of a workflow run of ``repository`` at a
    commit). Which workflow signed it is in the certificate, ``gh attestation verify``'s to check."""
    problems: list[str] = []
    if statement.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is {statement.get('_type')!r}, not {STATEMENT_TYPE}")
    subjects = statement.get("subject")
    digests = {(s.get("name"), _at(s, "digest", "sha256")) for s in subjects if isinstance(s, Mapping)} \
        if isinstance(subjects, Sequence) else set()
    if (wheel, sha256) not in digests:
        problems.append(f"no subject names {wheel} with sha256 {sha256}")
    if provenance is not None and not any(name and str(name).startswith(f"{wheel}/") and str(name).endswith(
            f"/{BUILD_INFO_NAME}") and digest == provenance for name, digest in digests):
        problems.append(f"no subject names the wheel's {BUILD_INFO_NAME} with sha256 {provenance}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    predicate = statement.get("predicate")
    if _at(predicate, "buildDefinition", "buildType") != BUILD_TYPE:
        problems.append(f"buildDefinition.buildType is {_at(predicate, 'buildDefinition', 'buildType')!r}, "
                        f"not {BUILD_TYPE}")
    workflow_params = _at(predicate, "buildDefinition", "externalParameters", "workflow")
    if _at(workflow_params, "repository") != f"https://github.com/{repository}":
        problems.append(f"the build's workflow is of {_at(workflow_params, 'repository')!r}, not "
                        f"https://github.com/{repository}")
    builder = _at(predicate, "runDetails", "builder", "id")
    if not isinstance(builder, str) or not builder.startswith(f"https://github.com/{repository}/"):
        problems.append(f"runDetails.builder.id is {builder!r}, not a workflow of {repository}")
    run = _at(predicate, "runDetails", "metadata", "invocationId")
    if not isinstance(run, str) or f"github.com/{repository}/actions/runs/" not in run:
        problems.append(f"runDetails.metadata.invocationId is {run!r}, not a run of {repository}")
    commit = [d for d in (_at(predicate, "buildDefinition", "resolvedDependencies") or [])
              if isinstance(d, Mapping) and re.fullmatch(r"[0-9a-f]{40}", str(_at(d, "digest", "gitCommit")))]
    if not commit:
        problems.append("buildDefinition.resolvedDependencies names no git commit")
    return problems


def provenance_sha256(wheel: Path) -> str:
    """The sha256 of the wheel's ``_build_info.json``."""
    member = member_of(wheel)
    with SafeWheel(wheel) as zf:
        return zf.sha256(member)

