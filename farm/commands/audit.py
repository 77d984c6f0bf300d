"""``farm audit [WHERE]``: judge published wheels against their own provenance.

WHERE is a folder of wheels, one wheel, or a PEP 503 index URL (default: the static index of
the default publish target). Verdicts: ok, wheel-wrong, config-moved, unledgered, inferred.
Exit 1 when any wheel is ``wheel-wrong``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError
from farm.load.recipes import load_config
from farm.model.config import DEFAULTS_FILE, FarmConfig
from farm.progress import reporter
from farm.provenance.audit import AuditRow, AuditVerdict, audit
from farm.provenance.crawl import Scratch, Shard, fleet_wheels, iter_wheels
from farm.provenance.judge import derive_from_config
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerfiles import ledger_location
from farm.publish.indexsettings import IndexSettings
from farm.table import format_table


def add_common(parser: argparse.ArgumentParser) -> None:
    """Arguments audit and backfill share."""
    parser.add_argument("where", nargs="?", metavar="WHERE",
                        help="a folder of wheels, a .whl, or an index URL (default: the static index target)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the farm repository (default: .)")
    parser.add_argument("--ledger", type=Path, default=None,
                        help="the ledger folder, or a single-file ledger (default: ROOT/ledger)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--no-config", action="store_true",
                        help="judge against provenance only, not today's policy")
    parser.add_argument("--from-ledger", action="store_true",
                        help="audit the fleet the ledger records as published (its http(s) URLs), "
                             "downloading one wheel at a time; WHERE is not given")
    parser.add_argument("--shard", metavar="I/N",
                        help="judge only bucket I of N (by sha256): N audits in parallel judge each wheel once")
    parser.add_argument("--scratch", type=Path, metavar="DIR",
                        help="where downloaded wheels wait to be judged (one at a time; default: the temp dir)")
    parser.add_argument("--max-scratch", type=int, metavar="MIB",
                        help="the most one download may take on disk; a larger wheel is a finding, not a full disk")


def load_optional_config(root: Path) -> FarmConfig | None:
    """The farm config when ROOT is a farm repository; audits also run outside one."""
    return load_config(root) if (root / DEFAULTS_FILE).exists() else None


def resolve_where(where: str | None, config: FarmConfig | None) -> str:
    if where:
        return where
    if config is not None:
        for target in config.defaults.publish.values():
            if isinstance(target, IndexSettings):
                return str(target.path)
    raise UsageError("no WHERE given and no static index target configured",
                     hint="pass a folder of wheels or an index URL")


def ledger_path(args: argparse.Namespace) -> Path:
    ledger: Path = args.ledger or ledger_location(args.root)
    return ledger


def _progress() -> Callable[[AuditRow], None]:
    """A line per wheel for sweeps that take minutes (farm.progress: a terminal or a CI log)."""
    say = reporter("audit")
    number = itertools.count(1)
    return lambda row: say(f"[{next(number)}] {row.filename}: {row.verdict.value}")


def _step_summary(rows: list[AuditRow], counts: Counter[str], warnings: list[str]) -> None:
    """A table in the GitHub Actions step summary (capped well below its 1 MiB limit)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    lines = ["## farm audit", "", *(f"**warning: {w}**" for w in warnings),
             " | ".join(f"{counts.get(v.value, 0)} {v.value}" for v in AuditVerdict), "",
             "| wheel | verdict | why |", "|---|---|---|"]
    shown = [r for r in rows if r.verdict is not AuditVerdict.OK][:500]
    lines += [f"| {r.filename} | {r.verdict.value} | {short(r.reasons[0]) if r.reasons else ''} |" for r in shown]
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def short(text: str, width: int = 100) -> str:
    """The first line of ``text`` (a table row is one line), cut to ``width``."""
    text = text.splitlines()[0] if text else text
    return text if len(text) <= width else text[: width - 3] + "..."


def run(args: argparse.Namespace) -> int:
    config = None if args.no_config else load_optional_config(args.root)
    path = ledger_path(args)
    shard = Shard.parse(args.shard) if args.shard else None
    if args.max_scratch is not None and args.max_scratch < 1:
        raise UsageError(f"--max-scratch must be >= 1 MiB, got {args.max_scratch}")
    scratch = Scratch(args.scratch, args.max_scratch << 20 if args.max_scratch else None)
    if args.from_ledger:
        if args.where:
            raise UsageError("--from-ledger audits what the ledger lists: give no WHERE with it")
        if not path.exists():
            raise UsageError(f"{path}: no ledger to read the fleet from", hint="pass --ledger")
        where = f"the published wheels of {path}"
        wheels: Any = fleet_wheels(path, shard=shard, scratch=scratch)
    else:
        where = resolve_where(args.where, config if config is not None else load_optional_config(args.root))
        wheels = iter_wheels(where, shard=shard, scratch=scratch)
    ledger = LedgerIndex.load(path) if path.exists() else LedgerIndex.empty()
    rows = audit(wheels, ledger, derive_from_config(config) if config is not None else None,
                 progress=_progress() if not args.json else None)
    counts = Counter(r.verdict.value for r in rows)
    # reading nothing is not a pass: say so wherever the result is read
    warnings = [] if rows else [f"audited no wheel ({where}" + (f", shard {args.shard}" if args.shard else "")
                                + "): an empty fleet is not a clean one; check WHERE, --ledger or --shard"]
    for warning in warnings:
        print(f"farm audit: warning: {warning}", file=sys.stderr)
    _step_summary(rows, counts, warnings)
    if args.json:
        print(json.dumps({"where": where, "ledger": str(path) if path.exists() else None,
                          "shard": args.shard,
                          "scratch": {"downloads": scratch.downloads, "peak_bytes": scratch.peak,
                                      "limit_bytes": scratch.cap},
                          "counts": {v.value: counts.get(v.value, 0) for v in AuditVerdict},
                          "warnings": warnings,
                          "wheels": [r.to_json() for r in rows]}, indent=2))
    else:
        table = [(r.filename, r.verdict.value, r.source or "-", short(r.reasons[0]) if r.reasons else "")
                 for r in rows]
        print(format_table(("wheel", "verdict", "provenance", "why"), table))
        for r in rows:
            if r.verdict in (AuditVerdict.WHEEL_WRONG, AuditVerdict.CONFIG_MOVED):
                print(f"\n{r.location}: {r.verdict.value}")
                for reason in r.reasons:
                    print(f"  {reason}")
        tally = ", ".join(f"{counts.get(v.value, 0)} {v.value}" for v in AuditVerdict)
        print(f"\n{tally} ({len(rows)} wheel{'' if len(rows) == 1 else 's'})")
    return EXIT_DEFECT if counts.get(AuditVerdict.WHEEL_WRONG.value) else EXIT_OK
