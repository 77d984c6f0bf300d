"""``farm backfill [WHERE]``: record ``inferred`` ledger entries for wheels with no provenance.

Each entry holds what inspection and the file name can say (found targets, extension hashes,
cell from the ``+cuXXXtorchM.m`` label); every other field is null, ``provenance: inferred``.
"""

from __future__ import annotations

import argparse
import json

from farm.commands.audit import (
    add_common,
    ledger_path,
    load_optional_config,
    resolve_where,
    short,
)
from farm.errors import EXIT_OK
from farm.provenance.backfill import backfill
from farm.table import format_table


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)


def run(args: argparse.Namespace) -> int:
    config = load_optional_config(args.root)
    where = resolve_where(args.where, config)
    result = backfill(where, ledger_path(args), config=config)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        rows = [(f, "added (inferred)") for f in result.added] + [(f, short(r, 200)) for f, r in result.skipped]
        if rows:
            print(format_table(("wheel", "result"), rows))
        print(f"\n{len(result.added)} inferred entr{'y' if len(result.added) == 1 else 'ies'} added to "
              f"{result.ledger}, {len(result.skipped)} skipped")
    return EXIT_OK
