"""``farm index DIR``: regenerate a static PEP 503 tree from its files and the ledger."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from farm.load.defaults import load_defaults
from farm.model.config import DEFAULTS_FILE
from farm.provenance.ledgerfiles import ledger_location
from farm.publish.indexsettings import IndexSettings
from farm.publish.publish import regenerate_index, regenerate_variants


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", type=Path, metavar="DIR", help="the index tree (holds files/ and packages.json)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--ledger", type=Path, help="the ledger folder, or a single-file ledger (default: ROOT/ledger)")
    parser.add_argument("--fragments", type=Path, action="append", default=[], metavar="DIR",
                        help="folders holding ledger fragments not merged yet")
    parser.add_argument("--links", metavar="TARGET",
                        help="also list every wheel the ledger records as published to TARGET, linked "
                             "there (default: the `links` of the index target configured at DIR)")
    parser.add_argument("--allow-drop", action="append", default=[], metavar="PROJECT",
                        help="allow the tree to stop listing this project (repeatable)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def configured(root: Path, tree: Path) -> IndexSettings | None:
    """The index target of ``_defaults.yml`` whose path is ``tree``."""
    path = root / DEFAULTS_FILE
    if not path.exists():
        return None
    for target in load_defaults(path).publish.values():
        if isinstance(target, IndexSettings) and target.path.resolve() == tree.resolve():
            return target
    return None


def run(args: argparse.Namespace) -> int:
    root = args.root.resolve()
    target = configured(root, args.dir)
    links = args.links or (target.links if target else None)
    ledger = args.ledger or ledger_location(root)
    report = regenerate_index(args.dir, ledger=ledger, fragment_dirs=args.fragments, allow_drop=args.allow_drop,
                              links=links)
    variants = (regenerate_variants(args.dir, ledger=ledger, fragment_dirs=args.fragments,
                                    allow_drop=args.allow_drop) if target and target.variants else None)
    if args.json:
        print(json.dumps({"root": str(report.root), "files": report.files, "channels": list(report.channels),
                          "links": links, "written": list(report.written), "removed": list(report.removed),
                          "variants": None if variants is None else {
                              "wheels": {base: v.filename for base, v in variants.made.items()},
                              "channels": list(variants.channels),
                              "left_out": [{"wheel": w, "why": why} for w, why in variants.left_out],
                              "written": list(variants.written), "removed": list(variants.removed)}},
                         indent=2))
    else:
        print(f"{report.root}: {report.files} wheel(s) in {len(report.channels)} channel(s); "
              f"{len(report.written)} page(s) rewritten, {len(report.removed)} removed")
        for ch in report.channels:
            print(f"  {ch}/")
        if variants is not None:
            print(f"wheel variants: {len(variants.made)} in {len(variants.channels)} channel(s) under variants/; "
                  f"{len(variants.written)} file(s) rewritten, {len(variants.removed)} removed")
            for wheel, why in variants.left_out:
                print(f"  no variant: {wheel}: {why}")
    return 0
