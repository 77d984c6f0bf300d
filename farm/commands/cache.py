"""``farm cache prune [--dry-run] [--keep-recent N] [--min-age S] [--kind K]``: bound the build caches.

Removes the toolkits, build environments, source trees and cell work folders under the cache
(``ROOT/.cache`` or ``--cache-dir``) that neither the ledger's last N cells nor today's recipes
use, and the container image probes of images the host no longer holds, and says how many bytes
that freed (``--dry-run``: what it would remove and free, removing nothing). A file hard-linked
from several folders (build environments sharing torch) counts once, and is freed only when the
prune removes every folder that links it. What is kept and why: ``farm.builder.prune``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from farm.builder.images import held_probes
from farm.builder.prune import (
    DEFAULT_KEEP_RECENT,
    DEFAULT_MIN_AGE_S,
    KINDS,
    apply_prune,
    in_use,
    plan_prune,
    recent_entries,
    recipe_pins,
    recipe_vendored,
)
from farm.errors import EXIT_OK, UsageError
from farm.fsutil import CACHE_TAG, is_farm_cache
from farm.load.recipes import load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["prune"], help="prune: remove what no recent cell or recipe uses")
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed and freed; remove nothing")
    parser.add_argument("--keep-recent", type=int, default=DEFAULT_KEEP_RECENT, metavar="N",
                        help=f"keep what the ledger's last N entries used (default {DEFAULT_KEEP_RECENT})")
    parser.add_argument("--min-age", type=float, default=DEFAULT_MIN_AGE_S, metavar="SECONDS",
                        help=f"keep anything changed more recently (default {DEFAULT_MIN_AGE_S:.0f}: a build "
                             "filling it now)")
    parser.add_argument("--kind", action="append", choices=KINDS,
                        help="only these caches (repeatable; default: all)")
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--cache-dir", type=Path, help="the cache (default: ROOT/.cache)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    if args.keep_recent < 0 or not math.isfinite(args.min_age) or args.min_age < 0:
        raise UsageError(f"--keep-recent and --min-age must be finite numbers >= 0 (got {args.keep_recent}, "
                         f"{args.min_age})", hint="--min-age 0 prunes what changed a moment ago; nan turned the "
                                                  "age guard off")
    config = load_config(args.root)
    cache = (args.cache_dir or config.root / ".cache").absolute()
    if not cache.exists():
        raise UsageError(f"--cache-dir {cache}: no such folder", hint="pass the folder farm build's --cache-dir named")
    if not is_farm_cache(cache):
        raise UsageError(f"--cache-dir {cache} is not a farm cache: it has no {CACHE_TAG} of farm's and holds "
                         "what farm does not keep there", where=str(cache),
                         hint="name the folder farm build used as --cache-dir (ROOT/.cache by default); a prune "
                              "removes folders, so it only works in farm's own")
    commits, sdists = recipe_pins(config, cache / "sources")
    vendored, archives = recipe_vendored(config, cache / "sources")
    kinds = args.kind or KINDS
    images = held_probes(cache) if "images" in kinds else frozenset()  # asks the engines: only when pruned
    used = in_use(recent_entries(config.ledger_path, args.keep_recent), commits=commits, sdists=sdists,
                  vendored=vendored, archives=archives, images=images)
    plan = plan_prune(cache, used, kinds=kinds, min_age_s=args.min_age)
    say = None if args.json else (lambda m: print(f"farm cache: {m}", file=sys.stderr))
    freed = plan.freed if args.dry_run else apply_prune(plan, say=say)
    if args.json:
        print(json.dumps({**plan.to_json(), "bytes_freed": freed, "dry_run": args.dry_run}, indent=2))
        return EXIT_OK
    for item in plan.items:
        verb = "keep" if item.keep else ("would remove" if args.dry_run else "removed")
        why = f" ({item.keep})" if item.keep else ""
        if not item.keep and item.frees != item.size:
            why = f" (frees {_human(item.frees)}: the rest is shared by hard links with other folders)"
        print(f"{verb:12} {item.kind:8} {_human(item.size):>9}  {item.path}{why}")
    kept = plan.kept
    print(f"{'would free' if args.dry_run else 'freed'} {_human(freed)} ({freed} bytes) in "
          f"{len(plan.removed)} entries; kept {_human(kept)} in {len(plan.items) - len(plan.removed)}")
    return EXIT_OK
