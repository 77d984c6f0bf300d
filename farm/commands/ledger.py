"""``farm ledger migrate|check [--root .]``: the ledger's files.

``migrate`` moves the records of a single ``ledger.jsonl`` (a repository from before the ledger
folder) into ``ledger/``, one file per package and build epoch, each line byte for byte; the
folder is read back and compared with the file before the file is removed. ``check`` reads
the whole ledger (every line validated) and says which file, if any, nears the size GitHub warns
about (50 MB) or refuses in a push (100 MB): exit 1 then.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from farm.errors import EXIT_DEFECT, EXIT_OK, UsageError
from farm.model.config import LEDGER_DIR, LEDGER_FILE
from farm.provenance.ledger import LedgerIndex
from farm.provenance.ledgerfiles import ledger_location, segments, warn_sizes
from farm.provenance.ledgerwrite import migrate


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["migrate", "check"],
                        help=f"migrate: {LEDGER_FILE} into the {LEDGER_DIR}/ folder; check: read it all, and its sizes")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--json", action="store_true", help="machine-readable output: one object")


def run(args: argparse.Namespace) -> int:
    root: Path = args.root
    if args.action == "migrate":
        single = root / LEDGER_FILE
        if not single.is_file():
            raise UsageError(f"no {LEDGER_FILE} in {root} to migrate",
                             hint=f"the ledger is already the {LEDGER_DIR}/ folder, or pass the repository's --root")
        done = migrate(single, root / LEDGER_DIR)
        largest = max(done.files.values(), default=0)
        if args.json:
            print(json.dumps({"migrated": done.records, "files": done.files}, indent=2))
            return EXIT_OK
        print(f"moved {done.records} record(s) of {LEDGER_FILE} into {len(done.files)} file(s) under {LEDGER_DIR}/ "
              f"(the largest holds {largest}); {LEDGER_FILE} is removed. Commit both:\n"
              f"  git add {LEDGER_DIR} {LEDGER_FILE} && git commit -m 'ledger: one file per package and epoch'")
        return EXIT_OK
    ledger = ledger_location(root)
    index = LedgerIndex.load(ledger)
    files = segments(ledger)
    print(f"{ledger}: {len(index)} record(s) in {len(files)} file(s), every line valid")
    big = warn_sizes(ledger)
    if args.json:
        print(json.dumps({"ledger": str(ledger), "records": len(index), "files": len(files), "too_large": big},
                         indent=2))
    else:
        for line in big:
            print(line)
    return EXIT_DEFECT if big else EXIT_OK
