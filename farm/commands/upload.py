"""``farm upload DIR [--target NAME]``: gate every wheel, publish each, record each in the ledger;
the summary lists every wheel's verdict."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from farm.errors import UsageError
from farm.load.recipes import load_config
from farm.model.config import LEDGER_FILE, FarmConfig
from farm.provenance.judge import derive_from_config
from farm.publish.publish import UploadReport, find_wheels, upload
from farm.publish.targets import PublishTarget, select
from farm.publish.verdict import Verdict


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the folder postbuild wrote (wheels + fragments)")
    parser.add_argument("--target", action="append", metavar="NAME",
                        help="a publish target of _defaults.yml (repeatable; default: default_target)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--ledger", type=Path, help="the ledger (default: ROOT/ledger.jsonl)")
    parser.add_argument("--fragments", type=Path, action="append", default=[], metavar="DIR",
                        help="more folders holding ledger fragments (DIR itself is always searched)")
    parser.add_argument("--dry-run", action="store_true",
                        help="gate and plan (each wheel's verdict-to-be; GitHub is only read); send nothing")
    parser.add_argument("--delete-orphans", action="store_true",
                        help="delete a release asset under a wheel's name that no ledger entry records and that "
                             "fails re-assertion, then publish the wheel in its place")
    publish_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def publish_options(parser: argparse.ArgumentParser) -> None:
    """``--publishers`` and ``--push-ledger``: how a publishing command shares GitHub's limits and
    the ledger's branch with the other jobs publishing at once (``farm upload``, ``farm publish-shard``)."""
    parser.add_argument("--publishers", type=int, default=1, metavar="N",
                        help="jobs publishing to GitHub at once with the same token: each keeps to 1/N of "
                             "GitHub's rate limits (default: 1; build.yml: its 8 shard jobs and the link job)")
    parser.add_argument("--push-ledger", metavar="REMOTE",
                        help="commit the ledger and push it to this git remote as records are made (farm upload: "
                             "after each record; farm publish-shard: at most once a minute and at the end; fetch, "
                             "rebase and retry when another writer pushed first); without it the records stay in "
                             "the checkout's ledger file")


def check_publishers(publishers: int) -> None:
    if publishers < 1:
        raise UsageError(f"--publishers {publishers}: must be at least 1")


def configured_targets(config: FarmConfig, names: list[str] | None) -> list[PublishTarget]:
    """The targets to publish to: ``--target`` names, else ``default_target``, else all."""
    default = config.defaults.default_target
    return select(config.defaults.publish, names or ([default] if default else None))


def report_json(report: UploadReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "dry_run": report.dry_run,
        "gate": {"passed": [w.filename for w in report.gate.passed],
                 "refused": [r.to_json() for r in report.gate.refused],
                 "readers": report.gate.readers, "config_checked": report.gate.config_checked},
        "refusals": [v.line() for v in report.verdicts if v.verdict is Verdict.REFUSED and v.target != "gate"],
        "targets": [
            {"target": o.target, "kind": o.kind, "sent": list(o.sent),
             "placed": [{"filename": f, "url": u} for f, u in o.placed],
             "commands": list(o.commands), "warnings": list(o.warnings)}
            for o in report.outcomes
        ],
        "ledger": {"merged": list(report.merged), "published_records_added": report.recorded,
                   "pushes": report.pushes, "push_error": report.push_error},
        "verdicts": [v.to_json() for v in report.verdicts],
        "github": [{"target": o.target, "requests": o.requests, "rate_limited": o.rate_limited,
                    "throttled_s": round(o.throttled_s, 3)} for o in report.outcomes if o.kind == "github"],
    }


def render(report: UploadReport) -> str:
    lines: list[str] = [f"gate: {len(report.gate.passed)} wheel(s) passed, {len(report.gate.refused)} problem(s) "
                        f"(re-inspected with {report.gate.readers}"
                        + (", lists re-derived from the configuration)" if report.gate.config_checked else ")")]
    lines += report.gate.lines()
    for o in report.outcomes:
        verb = "would send" if report.dry_run else "sent"
        line = f"{o.target} ({o.kind}): {verb} {len(o.sent)}, already there {len(o.placed) - len(o.sent)}"
        if o.kind == "github":
            line += (f"; {o.requests} API request(s), {o.rate_limited} rate-limit wait(s), "
                     f"throttled {o.throttled_s:.0f} s")
        lines.append(line)
        lines += [f"  warning: {w}" for w in o.warnings]
    counts = Counter(v.verdict.value for v in report.verdicts)
    lines.append("verdicts: " + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none"))
    lines += [f"  {v.line()}" for v in report.verdicts]
    if not report.dry_run:
        lines.append(f"ledger: {len(report.merged)} entr(ies) merged, {report.recorded} publication(s) recorded"
                     + (f", {report.pushes} commit(s) pushed" if report.pushes else ""))
        if report.push_error:
            lines.append(f"ledger push failed (the commits stay local; push them again): {report.push_error}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    check_publishers(args.publishers)
    find_wheels(args.dir)  # a wrong folder is said before the configuration is read
    config = load_config(root)  # _defaults.yml and the recipes, read once
    targets = configured_targets(config, args.target)
    # The gate re-derives every wheel's arch list from this configuration.
    derive = derive_from_config(config)
    report = upload(args.dir, targets, ledger=args.ledger or root / LEDGER_FILE, fragment_dirs=args.fragments,
                    dry_run=args.dry_run, delete_orphans=args.delete_orphans, derive=derive,
                    publishers=args.publishers, push_ledger=args.push_ledger)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print(render(report), file=sys.stdout if report.ok else sys.stderr)
    return report.exit_code
