"""Benchmark: ``farm matrix --json`` at the public farm's scale, as a whole process.

Scale: the public farm's 44 real recipes and its grid (29 (cuda, torch) rows, Python 3.10-3.15,
3 platforms), rewritten into farm's schema in a temporary directory, plus a synthetic ledger of
30,000 lines (most current cells built at epoch 0, some with an older arch list (stale), the rest
older versions), so every cell goes through its exists-key lookup.

Anchor: the public farm's own generator computes its 14,413 cells in ~7.4 s offline, with no
exists checks at all. Targets at that scale (1x): <= 0.5 s wall and <= 100 MB peak RSS on a 2-core
machine, both cold (no index cache: the 52 MB ledger parsed in full, as in a CI job on a fresh
clone; each cold run gets an empty --cache-dir) and warm (the ledger unchanged since the last run,
its validated index read from ROOT/.cache). Cold and warm runs are interleaved. The same run at
4x (each recipe 4 times under other names, a 4x ledger) shows the cost is linear: the 4x time is
at most ~4x the 1x time.

The lint runs with ``--no-lint``: the 44 recipes pin GitHub sources, and a warm lint cache needs
the fetched trees. The lint's own cost is measured by the lint's benchmark.

Usage: python benchmarks/bench_matrix.py [--anchor DIR] [--ledger-lines N] [--runs N] [--scales 1,4] [--keep]
The anchor directory comes from --anchor, else $FARM_ANCHOR_FARM, else ../shared/anchor-farm
relative to the repository root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
ANCHOR_SECONDS = 7.4
ANCHOR_CELLS = 14_413
TARGET_SECONDS = 0.5
TARGET_MB = 100.0

PLATFORM = {"linux": "linux_x86_64", "windows": "win_amd64", "linux_aarch64": "linux_aarch64"}


# --------------------------------------------------------------------------------------------
# Rewriting the public farm's data into farm's schema
# --------------------------------------------------------------------------------------------
def _minor(version: str) -> str:
    v = Version(version)
    return f"{v.major}.{v.minor}"


def rewrite_defaults(anchor: Path) -> dict[str, Any]:
    d = anchor / "defaults"
    grid_src = yaml.safe_load((d / "python_cuda_torch_os_policy.yml").read_text())
    policy_src = yaml.safe_load((d / "arch_policy.yml").read_text())
    phantoms_src = json.loads((d / "phantom_combos.json").read_text())["combos"]
    cuda_lines = [str(c) for c in grid_src["supported_cudas"]]
    by_cu = {c.replace(".", ""): c for c in cuda_lines}
    phantoms = []
    for cu, torch, py, plat in phantoms_src:
        phantoms.append({"cuda": by_cu[cu], "torch": torch, "python": f"{py[0]}.{py[1:]}",
                         "platform": PLATFORM[plat]})
    exceptions = []
    for key, arch in (policy_src.get("arch_exceptions") or {}).items():
        cuda, torch = key.split("/")
        exceptions.append({"cuda": cuda, "torch": torch, "arch_list": str(arch)})
    return {
        "build_epoch": 0,
        "cuda_lines": cuda_lines,
        "python": {"min": "3.10", "max": "3.15"},
        "platforms": [PLATFORM[p] for p in grid_src["platforms"]],
        "grid": [{"cuda": str(r["cuda"]), "torch": str(r["pytorch"]),
                  "python": [str(p) for p in r["python_versions"]]} for r in grid_src["combinations"]],
        "phantoms": phantoms,
        "arch_policy": {
            "x86_64": {str(k): str(v) for k, v in policy_src["arch_policy"].items()},
            "aarch64": {str(k): str(v) for k, v in policy_src["arch_policy_aarch64"].items()},
            "exceptions": exceptions,
        },
    }


def _version(pkg: dict[str, Any]) -> str:
    for candidate in (pkg.get("version"), str(pkg.get("source_tag", "")).removeprefix("v")):
        if candidate is None:
            continue
        try:
            Version(str(candidate))
            return str(candidate)
        except InvalidVersion:
            continue
    return "0.0.0"


def rewrite_recipe(pkg_dir: Path) -> dict[str, Any]:
    pkg = yaml.safe_load((pkg_dir / "package.yml").read_text())
    def optional(name: str) -> Any:
        return yaml.safe_load((pkg_dir / name).read_text()) if (pkg_dir / name).exists() else {}

    arch_src = optional("arch_override.yml")
    pcto = optional("pcto_override.yml")
    recipe: dict[str, Any] = {
        "name": pkg["name"],
        "version": _version(pkg),
        "source": {"git": {"repo": pkg["source_repo"], "ref": str(pkg["source_tag"]),
                           "submodules": bool(pkg.get("clone_recursive", False))}},
        "links_torch": bool(pkg["links_torch"]),
    }
    arch: dict[str, Any] = {}
    if "arch_list" in arch_src:
        arch["list"] = str(arch_src["arch_list"])
    if "arch_list_by_cuda" in arch_src:
        arch["by_cuda"] = {str(k): str(v) for k, v in arch_src["arch_list_by_cuda"].items()}
    aarch: dict[str, Any] = {}
    if "arch_list_aarch64" in arch_src:
        aarch["list"] = str(arch_src["arch_list_aarch64"])
    if "arch_list_by_cuda_aarch64" in arch_src:
        aarch["by_cuda"] = {str(k): str(v) for k, v in arch_src["arch_list_by_cuda_aarch64"].items()}
    if aarch:
        arch["aarch64"] = aarch
    if arch:
        recipe["arch"] = arch
    if "min_pytorch" in pcto:
        recipe["min_torch"] = _minor(str(pcto["min_pytorch"]))
    only: dict[str, Any] = {}
    matrix = pcto.get("build_matrix") or {}
    platforms = matrix.get("platforms") or pkg.get("platforms")
    if platforms:
        only["platforms"] = [PLATFORM[p] for p in platforms]
    if matrix.get("combinations"):
        only["combinations"] = [
            {"cuda": str(c["cuda"]), "torch": _minor(str(c["pytorch"])),
             "python": [str(p) for p in c["python_versions"]]}
            for c in matrix["combinations"]
        ]
    if only:
        recipe["only"] = only
    return recipe


def write_tree(anchor: Path, root: Path, copies: int = 1) -> int:
    """The recipes, each ``copies`` times (the copies under other names: ``NAME_x1`` ...)."""
    (root / "packages").mkdir(parents=True)
    (root / "_defaults.yml").write_text(yaml.safe_dump(rewrite_defaults(anchor), sort_keys=False))
    count = 0
    for pkg_dir in sorted(p for p in (anchor / "packages").iterdir() if (p / "package.yml").exists()):
        recipe = rewrite_recipe(pkg_dir)
        for copy in range(copies):
            name = recipe["name"] if copy == 0 else f"{recipe['name']}_x{copy}"
            text = yaml.safe_dump({**recipe, "name": name}, sort_keys=False)
            (root / "packages" / f"{name}.yml").write_text(text)
            count += 1
    return count


# --------------------------------------------------------------------------------------------
# A synthetic ledger with realistic entries
# --------------------------------------------------------------------------------------------
def _sha(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def _entry(cell: dict[str, Any], version: str, arch: str, wheel: str, rng: random.Random) -> dict[str, Any]:
    so = f"{cell['package']}/_C.cpython-{cell['python_tag'][2:]}-x86_64-linux-gnu.so"
    return {
        "schema_version": 1, "package": cell["package"], "dist": cell["package"], "version": version,
        "cell": {"cuda": cell["cuda"], "torch": cell["torch"], "python": cell["python_tag"],
                 "platform": cell["platform"]},
        "build_epoch": 0,
        "arch_list": {"requested": arch, "normalised": arch},
        "expected": {so: arch}, "found": {so: arch},
        "assertion": {"result": "passed", "native_reader": "farm 0.1.0", "cuobjdump": "13.2.51"},
        "defaults_sha256": _sha("defaults"), "recipe_sha256": _sha("recipe", cell["package"]),
        "run": {"provider": "github", "repository": "farm-wheels/farm-wheels", "commit": _sha("c", rng.random())[:40],
                "run_id": str(rng.randrange(10**9, 10**10)), "attempt": "1"},
        "source": {"kind": "git", "repo": f"https://github.com/o/{cell['package']}.git", "ref": f"v{version}",
                   "commit": _sha("src", cell["package"], version)[:40]},
        "toolchain": {"nvcc": f"{cell['cuda']}.88", "torch": cell.get("torch_version"), "python": cell["python"] + ".7",
                      "builder": "cibuildwheel", "cibuildwheel": "3.1.4"},
        "extensions": {so: _sha("so", wheel)},
        "provenance": "asserted",
        "filename": wheel, "sha256": _sha("whl", wheel), "size": rng.randrange(10**5, 5 * 10**8),
        "published": [{"target": "github", "url": f"https://github.com/farm-wheels/farm-wheels/releases/download/"
                                                  f"{cell['package']}-v{version}/{wheel}"}],
    }


def write_ledger(root: Path, cells: list[dict[str, Any]], lines: int, seed: int = 5) -> dict[str, int]:
    """75% of the current cells built (2% of those with an older arch list), the rest of the lines
    older versions of the same packages (never matching a current exists-key)."""
    rng = random.Random(seed)
    out: list[str] = []
    built = stale = 0
    for cell in cells:
        if len(out) >= lines:
            break
        if rng.random() < 0.75:
            arch = cell["arch_list"]
            if rng.random() < 0.02:
                arch, stale = "sm_61;compute_61", stale + 1  # no current list has it
            else:
                built += 1
            out.append(json.dumps(_entry(cell, cell["version"], arch, cell["wheel"], rng), separators=(",", ":")))
    old = 0
    while len(out) < lines:
        cell = cells[rng.randrange(len(cells))]
        version = f"{cell['version']}.post{old}"
        wheel = cell["wheel"].replace(f"-{cell['version']}+", f"-{version}+", 1)
        out.append(json.dumps(_entry(cell, version, cell["arch_list"], wheel, rng), separators=(",", ":")))
        old += 1
    (root / "ledger.jsonl").write_text("\n".join(out) + "\n")
    return {"built": built, "stale": stale, "older": old}


# --------------------------------------------------------------------------------------------
# Measuring a whole process
# --------------------------------------------------------------------------------------------
def farm_command() -> list[str]:
    script = Path(sys.executable).parent / "farm"
    return [str(script)] if script.exists() else [sys.executable, "-m", "farm.cli"]


# Runs the command from a small process: a child forked from this (large) benchmark process would
# count the benchmark's pages in its peak RSS (the kernel keeps the pre-exec high-water mark).
_LAUNCHER = """
import json, os, sys, time
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(out, 1)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss,
                  "rc": os.waitstatus_to_exitcode(status)}))
"""


def measure(cmd: list[str], stdout: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one run of ``cmd`` as a whole process."""
    exe = cmd[0] if Path(cmd[0]).is_absolute() else shutil.which(cmd[0]) or cmd[0]
    # As installed: the bytecode is cached (the warm-up run writes it). With PYTHONDONTWRITEBYTECODE
    # set, every run would compile farm's modules from source, which no user's install does.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, str(stdout), exe, *cmd[1:]],
                          capture_output=True, text=True, check=True, env=env)
    result = json.loads(proc.stdout)
    if result["rc"] != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result['rc']}): {proc.stderr}")
    return result["wall"], result["cpu"], result["rss_kb"] / 1024.0


@dataclass
class Series:
    """The runs of one kind: wall and CPU seconds, peak RSS in MB."""

    walls: list[float]
    cpus: list[float]
    rss: list[float]

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)

    @property
    def peak(self) -> float:
        return max(self.rss)

    def line(self) -> str:
        return (f"wall median {self.wall:.3f} s over {len(self.walls)} runs (min {min(self.walls):.3f}, "
                f"max {max(self.walls):.3f}); CPU median {self.cpu:.3f} s; peak RSS {self.peak:.1f} MB")


@dataclass
class Result:
    scale: int
    recipes: int
    cells: int
    declared: int
    ledger_lines: int
    ledger_mb: float
    ledger: dict[str, int]
    totals: dict[str, int]
    shard_count: int
    cold: Series  # no index cache: the ledger parsed in full, as in a CI job on a fresh clone
    warm: Series  # the ledger unchanged since the last run: its index comes from ROOT/.cache
    load: float


def run_scale(anchor: Path, tmp: Path, scale: int, ledger_lines: int, runs: int) -> Result:
    root = tmp / f"farm-{scale}x"
    recipes = write_tree(anchor, root, scale)
    (root / "ledger.jsonl").write_text("")
    cmd = [*farm_command(), "matrix", "--root", str(root), "--json", "--no-lint"]
    out = tmp / f"matrix-{scale}x.json"
    measure(cmd, out)
    everything = json.loads(out.read_text())
    cells = everything["cells"]
    lines = ledger_lines * scale
    ledger = write_ledger(root, cells, lines)
    ledger_mb = (root / "ledger.jsonl").stat().st_size / 1e6

    # farm does not cache the index of a ledger written in the last 2 s (a same-size rewrite
    # could go unseen): wait that long, as any real ledger is older than that.
    time.sleep(2.5)
    measure(cmd, out)  # warm the page cache and bytecode; writes the index cache under ROOT/.cache
    load = os.getloadavg()[0]  # a shared machine: wall times depend on it, CPU time less so
    # interleaved: a burst of load on the machine hits both series alike
    cold_dirs = tmp / f"cold-{scale}x"
    cold = Series([], [], [])
    warm = Series([], [], [])
    for i in range(runs):
        for series, extra in ((cold, ["--cache-dir", str(cold_dirs / str(i))]), (warm, [])):
            wall, cpu, peak = measure([*cmd, *extra], out)
            series.walls.append(wall)
            series.cpus.append(cpu)
            series.rss.append(peak)
    if not (root / ".cache" / "ledger-index").is_dir():
        sys.exit("the warm runs found no index cache under ROOT/.cache")
    result = json.loads(out.read_text())
    totals = result["totals"]
    if totals["stale"] != ledger["stale"] or totals["built"] != ledger["built"]:
        sys.exit(f"ledger/matrix disagree: {totals} vs {ledger}")
    if len(result["cells"]) != len(cells) - ledger["built"] - ledger["stale"]:
        sys.exit("cells lost between the runs")
    return Result(scale, recipes, len(cells), totals["declared"], lines, ledger_mb, ledger, totals,
                  result["shard_count"], cold, warm, load)


def report(r: Result) -> None:
    print(f"{r.scale}x: {r.recipes} recipes; cells after phantoms/policy/recipe limits: {r.cells:,}"
          + (f" (the public farm's generator: {ANCHOR_CELLS:,})" if r.scale == 1 else "")
          + f"; declared: {r.declared:,}")
    print(f"  ledger: {r.ledger_lines:,} lines, {r.ledger_mb:.1f} MB ({r.ledger['built']:,} built, "
          f"{r.ledger['stale']:,} stale, {r.ledger['older']:,} older versions)")
    print(f"  result: {r.totals['to_build']:,} to build, {r.totals['built']:,} built, {r.totals['stale']:,} stale, "
          f"{r.shard_count} shards; load average at start {r.load:.2f}")
    print(f"  cold (ledger parsed, as in CI): {r.cold.line()}")
    print(f"  warm (ledger index cached):     {r.warm.line()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--anchor", type=Path,
                        default=Path(os.environ.get("FARM_ANCHOR_FARM", REPO.parent / "shared" / "anchor-farm")))
    parser.add_argument("--ledger-lines", type=int, default=30_000, help="at 1x (scaled with the recipes)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--scales", default="1,4", help="comma-separated multiples of the public farm (default: 1,4)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary trees and print their path")
    args = parser.parse_args()
    if not (args.anchor / "packages").is_dir():
        sys.exit(f"{args.anchor}: not the public farm's data (no packages/); pass --anchor or set FARM_ANCHOR_FARM")
    scales = [int(x) for x in args.scales.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="farm-bench-matrix-"))
    try:
        results = [run_scale(args.anchor, tmp, k, args.ledger_lines, args.runs) for k in scales]
        print("farm matrix --json --no-lint, as a whole process (lint not run: GitHub sources; stated)")
        for r in results:
            report(r)
        base = results[0]
        for r in results[1:]:
            linear = r.cold.wall / base.cold.wall <= r.scale / base.scale * 1.1
            print(f"  {r.scale}x / {base.scale}x, cold: wall {r.cold.wall / base.cold.wall:.2f}x, CPU "
                  f"{r.cold.cpu / base.cold.cpu:.2f}x for {r.cells / base.cells:.1f}x "
                  f"the cells and {r.ledger_lines / base.ledger_lines:.1f}x the ledger "
                  f"({'linear or better' if linear else 'WORSE than linear'})")
        ok = True
        if base.scale == 1:
            print(f"  vs anchor ({ANCHOR_SECONDS} s for {ANCHOR_CELLS:,} cells, no exists checks): "
                  f"{ANCHOR_SECONDS / base.cold.wall:.1f}x faster cold, {ANCHOR_SECONDS / base.warm.wall:.1f}x warm")
            for name, series in (("cold", base.cold), ("warm", base.warm)):
                met_wall, met_rss = series.wall <= TARGET_SECONDS, series.peak <= TARGET_MB
                ok = ok and met_wall and met_rss
                print(f"  targets at 1x, {name}: wall <= {TARGET_SECONDS} s: {'met' if met_wall else 'MISSED'} "
                      f"({series.wall:.3f}); RSS <= {TARGET_MB:.0f} MB: {'met' if met_rss else 'MISSED'} "
                      f"({series.peak:.1f})")
        if args.keep:
            print(f"  trees kept under {tmp}")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
