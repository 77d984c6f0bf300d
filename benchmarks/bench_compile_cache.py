"""The compiler cache, measured on whole ``farm build`` commands as a maintainer types them.

``pythons``: demo_ext (CUDA 13.0, the farm's arch list for it) built for two Pythons in a row,
each by a farm installed for that interpreter (the native builder builds its own interpreter's
cells). Before: the second Python's cell with ``--no-compile-cache``. After: the first Python's
cell fills an empty cache, then the second Python's cell. Its .cu files must run no nvcc step.

    python benchmarks/bench_compile_cache.py pythons --interpreter PY_A --interpreter PY_B

``epoch``: a real torch extension cell (tests/data/torch_ext, torch 2.14 for CUDA 13.0 from pip's
configured indexes, the farm's arch list), built cold (the build environment made beforehand by an
uncached build), then rebuilt after a ``build_epoch`` bump in its recipe: 0 nvcc steps may run,
and the rebuild's wall time is printed against the cold build's (goal: <= 0.2x).

    python benchmarks/bench_compile_cache.py epoch

``pythons`` builds with ``$CUDA_HOME`` (a CUDA 13.0 toolkit); ``epoch`` with the toolkit farm
assembles for the cell (torch's CUDA components included). Both keep nvcc to one job (``MAX_JOBS=1``). The
compile steps come from each build's own counts (``<cache>/build/<cell>/compile-cache/stats.json``).
``--work DIR`` keeps the farm caches between runs (default: a new temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Run, measure

sys.path.insert(0, str(REPO))
from farm.builder.compilecache import Counts

TORCH_RECIPE = """\
name: torch_ext
version: '0.1.0'
source:
  path: src/torch_ext
links_torch: true
"""


def farm_for(interpreter: str, work: Path) -> str:
    """The ``farm`` script of a venv of ``interpreter`` holding this working tree (a regular install)."""
    version = subprocess.run([interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    venv = work / f"farm-py{version}"
    if not (venv / "bin" / "python").exists():
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(REPO)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                    str(REPO)], check=True)
    return str(venv / "bin" / "farm")


def counts(cache: Path, python_tag: str) -> Counts | None:
    found = sorted(cache.glob(f"build/*-{python_tag}-*/compile-cache/stats.json"))
    return Counts.from_stats(json.loads(found[0].read_text())) if found else None


def line(label: str, run: Run, c: Counts | None) -> str:
    steps = (f"{c.compiles:4} steps, {sum(c.hits.values()):4} hits, nvcc steps run {c.nvcc_run:3}, "
             f"cached {c.nvcc_cached:3}") if c else "uncached"
    return f"{label:44}{run.wall_s:8.1f}s wall  {steps}"


def pythons(args: argparse.Namespace, work: Path, env: dict[str, str]) -> int:
    if len(args.interpreter) != 2:
        raise SystemExit("pythons: give two --interpreter PATH (two Python versions)")
    farms = [farm_for(i, work) for i in args.interpreter]
    tags = [subprocess.run([i, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"], capture_output=True,
                           text=True, check=True).stdout.strip() for i in args.interpreter]
    cache = work / "cache"
    base = ["build", "demo_ext", "--cuda", "13.0", "--builder", "native", "--cuda-home", env["CUDA_HOME"],
            "--root", str(REPO), "--cache-dir", str(cache), "--out", str(work / "out"), "--overwrite"]
    for farm in farms:  # the build environments of both Pythons, made once, untimed
        measure([farm, *base, "--no-compile-cache"], env=env)
    before = measure([farms[1], *base, "--no-compile-cache"], env=env)
    shutil.rmtree(cache / "compile-cache", ignore_errors=True)
    fill = measure([farms[0], *base], env=env)
    fill_counts = counts(cache, tags[0])
    after = measure([farms[1], *base], env=env)
    after_counts = counts(cache, tags[1])
    print(f"demo_ext, CUDA 13.0, {tags[0]} then {tags[1]} (farm build --builder native, MAX_JOBS=1)")
    print(line(f"{tags[1]}, --no-compile-cache (before)", before, None))
    print(line(f"{tags[0]}, empty cache", fill, fill_counts))
    print(line(f"{tags[1]}, after {tags[0]} (after)", after, after_counts))
    print(f"{tags[1]} after/before: {after.wall_s / before.wall_s:.2f}x wall")
    if after_counts is None or after_counts.nvcc_run:
        print(f"FAIL: the second Python's cell ran {after_counts.nvcc_run if after_counts else '?'} nvcc step(s)")
        return 1
    print(f"ok: the second Python's cell ran no nvcc step ({after_counts.nvcc_cached} served from the cache)")
    return 0


def epoch(args: argparse.Namespace, work: Path, env: dict[str, str]) -> int:  # noqa: ARG001 (a subcommand's signature)
    farm = farm_for(sys.executable, work)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    root = work / "root"
    if not root.exists():
        (root / "packages").mkdir(parents=True)
        shutil.copy(REPO / "_defaults.yml", root / "_defaults.yml")
        (root / "ledger.jsonl").touch()
        shutil.copytree(REPO / "tests" / "data" / "torch_ext", root / "src" / "torch_ext")
    recipe = root / "packages" / "torch_ext.yml"
    recipe.write_text(TORCH_RECIPE)
    cache = work / "cache"
    base = ["build", "torch_ext", "--cuda", "13.0", "--torch", "2.14", "--python",
            f"{sys.version_info.major}.{sys.version_info.minor}", "--platform", "linux_x86_64", "--builder", "native",
            "--torch-index", "pip", "--root", str(root), "--cache-dir", str(cache),
            "--out", str(work / "out"), "--overwrite"]
    if not any((cache / "envs").glob("*-torch2.14*/farm-env.json")):  # the build environment (torch), untimed
        measure([farm, *base, "--no-compile-cache"], env=env)
    shutil.rmtree(cache / "compile-cache", ignore_errors=True)
    cold = measure([farm, *base], env=env)
    cold_counts = counts(cache, tag)
    recipe.write_text(TORCH_RECIPE + "build_epoch: 1\n")
    warm = measure([farm, *base], env=env)
    warm_counts = counts(cache, tag)
    print(f"torch_ext, CUDA 13.0, torch 2.14, {tag} (farm build --builder native, MAX_JOBS=1)")
    print(line("cold (empty cache)", cold, cold_counts))
    print(line("after a build_epoch bump", warm, warm_counts))
    ratio = warm.wall_s / cold.wall_s
    print(f"rebuild/cold: {ratio:.2f}x wall (goal <= 0.20x)")
    if warm_counts is None or warm_counts.nvcc_run:
        print(f"FAIL: the rebuild ran {warm_counts.nvcc_run if warm_counts else '?'} nvcc step(s)")
        return 1
    return 0 if ratio <= 0.2 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=("pythons", "epoch"))
    parser.add_argument("--interpreter", action="append", default=[], metavar="PATH",
                        help="pythons: a Python interpreter (twice), e.g. $(uv python find 3.12)")
    parser.add_argument("--work", type=Path, help="keep farm's caches here between runs")
    args = parser.parse_args()
    if args.scenario == "pythons" and not os.environ.get("CUDA_HOME"):
        raise SystemExit("set CUDA_HOME to a CUDA 13.0 toolkit")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-compile-cache-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MAX_JOBS": "1"}
    env.pop("PYTHONPATH", None)
    return pythons(args, work, env) if args.scenario == "pythons" else epoch(args, work, env)


if __name__ == "__main__":
    sys.exit(main())
