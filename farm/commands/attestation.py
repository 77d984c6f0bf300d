"""``farm attestation record|check``: the signed build provenance of published wheels.

``record --subjects FILE --url URL --repository OWNER/REPO``: after GitHub's attestation action
signed the subjects a publish job wrote (``farm publish-shard --subjects``), each wheel's ledger
line gets the attestation's reference; a wheel whose sha256 is not the ledger's is refused (exit 1),
the others recorded. ``--push-ledger REMOTE`` commits and pushes the ledger (rebase and retry).

``check WHEEL --repository OWNER/REPO``: read the attestations GitHub holds for the wheel's sha256
(GitHub's attestations API, ``GITHUB_API_URL``, a token in ``GH_TOKEN``/``GITHUB_TOKEN``) and check
what the statement says: an in-toto Statement v1 naming the wheel's sha256 and its
``_build_info.json``'s, with a SLSA provenance v1 predicate of a workflow run of the repository at a
commit. Exit 0 when one does, 1 when none does (or there is none). The signature is not checked
here: the command that checks it is printed (``gh attestation verify``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from farm.errors import EXIT_DEFECT, EXIT_OK, FarmError, UsageError
from farm.fsutil import sha256_file
from farm.model.config import LEDGER_FILE
from farm.provenance.buildinfo import Attestation
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerwrite import record_attestations
from farm.publish import ghrest
from farm.publish.attestation import (
    SIGNER_WORKFLOW,
    provenance_sha256,
    read_subjects,
    reference,
    statement_of,
    statement_problems,
    verify_command,
    wheels_of,
)
from farm.publish.ledgerpush import LedgerPusher


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("record", "check"), help="record: the ledger notes an attestation; "
                                                                   "check: what GitHub's attestation of a wheel says")
    parser.add_argument("wheel", nargs="?", metavar="WHEEL", help="check: the wheel file")
    parser.add_argument("--subjects", type=Path, metavar="FILE", help="record: the subjects the attestation signed")
    parser.add_argument("--url", metavar="URL", help="record: the attestation's URL (the action's attestation-url)")
    parser.add_argument("--repository", default=os.environ.get("GITHUB_REPOSITORY"), metavar="OWNER/REPO",
                        help="the repository that attested (default: $GITHUB_REPOSITORY)")
    parser.add_argument("--workflow", default=SIGNER_WORKFLOW, metavar="PATH",
                        help=f"record: the workflow that signed it (default: {SIGNER_WORKFLOW})")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--push-ledger", metavar="REMOTE", help="record: commit the ledger and push it to REMOTE")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _need(value: object, flag: str, action: str) -> None:
    if not value:
        raise UsageError(f"farm attestation {action} needs {flag}")


def run(args: argparse.Namespace) -> int:
    _need(args.repository, "--repository (or $GITHUB_REPOSITORY)", args.action)
    if args.action == "record":
        _need(args.subjects, "--subjects", "record")
        _need(args.url, "--url", "record")
        return _record(args)
    _need(args.wheel, "WHEEL", "check")
    return _check(args)


def _record(args: argparse.Namespace) -> int:
    attestation = reference(args.url, args.repository, args.workflow)
    wheels = wheels_of(read_subjects(args.subjects))
    ledger = args.root / LEDGER_FILE
    index = LedgerIndex.load(ledger)
    items: list[tuple[str, str, Attestation]] = []
    refused: list[str] = []
    for name, sha in sorted(wheels.items()):
        rec = index.by_filename(name)
        if rec is None or rec.sha256 != sha:  # the ledger, not the job that wrote the subjects, says what was published
            refused.append(f"{name}: the ledger records {'no such wheel' if rec is None else 'sha256 ' + rec.sha256}, "
                           f"the attestation names {sha}")
        else:
            items.append((name, sha, attestation))
    recorded = record_attestations(ledger, items)
    pushed = None
    if args.push_ledger and recorded:
        pusher = LedgerPusher(ledger, args.push_ledger)
        pusher(f"{recorded} attestation(s)")
        pushed = pusher.finish()
        if pushed is not None:
            raise FarmError(f"the ledger could not be pushed: {pushed}", hint="run the record job again")
    if args.json:
        print(json.dumps({"recorded": recorded, "refused": refused, "attestation": attestation.to_dict()}, indent=2))
    else:
        print(f"farm attestation: {recorded} wheel(s) recorded as attested by {attestation.url}")
        for line in refused:
            print(f"farm attestation: refused: {line}", file=sys.stderr)
    return EXIT_DEFECT if refused else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    wheel = Path(args.wheel)
    if not wheel.is_file():
        raise UsageError(f"{wheel}: no such wheel file")
    sha256, provenance = sha256_file(wheel), provenance_sha256(wheel)
    client = ghrest.actions_client(args.repository, os.environ)
    bundles = client.attestations(sha256)
    findings: list[tuple[int, list[str]]] = []
    for number, bundle in enumerate(bundles, 1):
        try:
            statement = statement_of(bundle, where=f"attestation {number} of sha256:{sha256}")
        except UsageError as exc:
            findings.append((number, [exc.message]))
            continue
        findings.append((number, statement_problems(statement, wheel=wheel.name, sha256=sha256, provenance=provenance,
                                                    repository=args.repository)))
    good = [n for n, problems in findings if not problems]
    verify = verify_command(str(wheel), Attestation("", args.repository, f"{args.repository}/{SIGNER_WORKFLOW}"))
    if args.json:
        print(json.dumps({"wheel": wheel.name, "sha256": sha256, "attested": bool(good), "verify": verify,
                          "attestations": [{"problems": p} for _, p in findings]}, indent=2))
    elif good:
        print(f"{wheel.name}: attested by {args.repository}: the statement names its sha256 and its "
              f"_build_info.json ({len(bundles)} attestation(s)); check the signature: {verify}")
    else:
        print(f"{wheel.name}: not attested by {args.repository}" + ("" if bundles else " (no attestation holds its "
                                                                      f"sha256 {sha256})"))
        for number, problems in findings:
            for line in problems:
                print(f"  attestation {number}: {line}")
    return EXIT_OK if good else EXIT_DEFECT
