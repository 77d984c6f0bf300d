"""``farm cache-plan [--measure [--index URL]] [--json]``: the Actions cache plan of the grid.

Every cell of the grid (``_defaults.yml`` and the recipes, the ledger ignored) names a toolkit key
(its CUDA line, platform and component set, as ``farm build`` requests it) and, when it links
torch, a torch key (platform, CUDA line, torch). The plan sizes each distinct key from
``farm/schedule/cache_sizes.json`` (:mod:`farm.schedule.cacheplan`) and sets the total against
GitHub's 10 GB.

``--measure`` measures the sizes again and rewrites that file: PyPI's torch wheels (PEP 691 JSON
pages, PEP 700 ``size``; each wheel's pinned requirements from its core metadata, PEP 658), the
PyPI wheels a ``source: pypi`` CUDA line is assembled from, and NVIDIA's redistrib manifests'
``size`` of the archives the other lines use (each manifest checked against its pinned sha256).
What cannot be reached is listed under ``not_measured`` and estimated by the plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from farm.errors import UsageError
from farm.fsutil import atomic_write
from farm.load.recipes import load_config
from farm.model.config import FarmConfig
from farm.provenance.ledger import LedgerIndex
from farm.schedule.cacheplan import DATA, CachePlan, CacheSizes, CellKeys, ToolkitKey, TorchKey, cache_plan
from farm.schedule.cachesizes import measure
from farm.schedule.matrix import Filters, compute_matrix

PYPI_SIMPLE = "https://pypi.org/simple/"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", type=Path, default=Path(), help="the farm repository (default: .)")
    parser.add_argument("--sizes", type=Path, default=DATA, help="the size table (default: farm's own)")
    parser.add_argument("--measure", action="store_true",
                        help="measure the sizes again from the package index and NVIDIA's manifests, and "
                             "rewrite the size table")
    parser.add_argument("--index", metavar="URL",
                        help="the simple-API index to measure (default: $PIP_INDEX_URL, else PyPI)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


# -- the keys of the grid -------------------------------------------------------------------------
def grid_keys(config: FarmConfig) -> tuple[set[ToolkitKey], set[TorchKey]]:
    """The toolkit and torch keys of every cell of the grid."""
    matrix = compute_matrix(config, LedgerIndex.empty(), Filters(), overwrite=True)
    keys = CellKeys(config)
    pairs = [keys.of(planned) for planned in matrix.cells]
    return {toolkit for toolkit, _ in pairs}, {torch for _, torch in pairs if torch is not None}


# -- the command ----------------------------------------------------------------------------------------
def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def render(plan: CachePlan, sizes: CacheSizes) -> str:
    lines = [f"sizes measured {sizes.measured_on} from {sizes.index}"]
    lines += [f"{r.what}: {r.keys} key(s), {r.measured} measured, {_gb(r.smallest)}-{_gb(r.largest)} a key, "
              f"{_gb(r.total_bytes)} in all" for r in plan.rows]
    verdict = "fits" if plan.fits else "does not fit"
    lines.append(f"all keys: {_gb(plan.total_bytes)} against GitHub's {_gb(plan.limit_bytes)}: {verdict}")
    return "\n".join(lines)


def plan_json(plan: CachePlan, sizes: CacheSizes) -> dict[str, object]:
    return {"measured_on": sizes.measured_on, "index": sizes.index, "limit_bytes": plan.limit_bytes,
            "total_bytes": plan.total_bytes, "fits": plan.fits, "not_measured": list(sizes.not_measured),
            "rows": [{"what": r.what, "keys": r.keys, "measured": r.measured, "total_bytes": r.total_bytes,
                      "smallest": r.smallest, "largest": r.largest} for r in plan.rows]}


def load_sizes(path: Path) -> CacheSizes:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the size table ({exc})",
                         hint="regenerate it: farm cache-plan --measure") from None
    return CacheSizes.from_json(data, str(path))


def run(args: argparse.Namespace) -> int:
    config = load_config(args.root.resolve())
    if args.measure:
        env: Mapping[str, str] = os.environ
        sizes = measure(config, args.index or env.get("PIP_INDEX_URL") or PYPI_SIMPLE,
                        today=datetime.now(UTC).date().isoformat(), env=env)
        atomic_write(args.sizes, [(json.dumps(sizes.to_json(), indent=1) + "\n").encode()])
        print(f"wrote {args.sizes}: {len(sizes.torch)} torch wheel(s), {len(sizes.toolkit)} toolkit component(s), "
              f"{len(sizes.not_measured)} not measured", file=sys.stderr)
    else:
        sizes = load_sizes(args.sizes)
    toolkits, torches = grid_keys(config)
    plan = cache_plan(toolkits, torches, sizes)
    print(json.dumps(plan_json(plan, sizes), indent=2) if args.json else render(plan, sizes))
    return 0
