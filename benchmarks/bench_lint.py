"""`farm lint` on the flash-attn 2.8.3 sdist (107 MB, 6,614 files), against `grep -rEn`, as processes.

Every side is a whole process (``_harness.measure``: CPU, wall, own peak RSS; min and median of
``--runs``), taking turns, the file cache warm for all:

- anchor: ``grep -rEn`` of the raw patterns the rules look for, over the same tree;
- cold: ``farm lint TREE --arch-list L`` with an empty cache folder each run (nothing remembered);
- warm, directory: the same command again, its answer remembered (``farm.lint.memo``);
- warm, recipe: ``farm lint flash_attn --arch-list L`` in the repository, source fetched and
  answer remembered.

Targets: cold CPU <= 4x grep's; warm <= 0.1 s (wall) for both.

    python benchmarks/bench_lint.py [--cache-dir DIR] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Series, installed_farm, interleaved, measure, table

sys.path.insert(0, str(REPO))
from farm.model.config import SdistSource
from farm.source.fetch import fetch

FLASH_ATTN = SdistSource("flash-attn", "2.8.3", "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d")
ARCHS = "8.0 9.0 10.0 12.0+PTX"
# The raw patterns the rules look for, as a maintainer would grep for them.
PATTERN = (r"__CUDA_ARCH|NV_IF_TARGET|NV_IF_ELSE_TARGET|NV_DISPATCH_TARGET|NV_PROVIDES_SM_|NV_HAS_FEATURE_SM_|"
           r"[eE]4[mM]3|[eE]5[mM]2|sm_[0-9]+|compute_[0-9]+|-gencode|-arch|TORCH_CUDA_ARCH_LIST|"
           r"CMAKE_CUDA_ARCHITECTURES|CUDA_ARCHITECTURES|CUDAARCHS")



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache", help="source cache (default: REPO/.cache)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        print("grep is not installed: no anchor", file=sys.stderr)
        return 3
    tree = fetch(FLASH_ATTN, args.cache_dir, package="flash_attn")
    farm = str(installed_farm(args.cache_dir / "bench"))
    anchor = [grep, "-rEn", PATTERN, str(tree.root)]
    hits = measure(anchor, ok=(0, 1)).stdout.count(b"\n")  # also warms the file cache
    with tempfile.TemporaryDirectory(prefix="bench-lint-") as tmp:
        memo = Path(tmp) / "memo"
        directory = [farm, "lint", str(tree.root), "--arch-list", ARCHS]
        recipe = [farm, "lint", "flash_attn", "--arch-list", ARCHS, "--cache-dir", str(args.cache_dir)]
        measure([*directory, "--cache-dir", str(memo)], ok=(0, 1))  # remember the directory's answer
        measure(recipe, ok=(0, 1))  # and the recipe's
        cold = {f"farm lint TREE (cold, run {i})": [*directory, "--cache-dir", str(Path(tmp) / f"cold{i}")]
                for i in range(args.runs)}
        # cold: a fresh cache folder each run, so nothing is remembered
        rounds = interleaved({"grep -rEn (anchor)": anchor,
                              "farm lint TREE (warm)": [*directory, "--cache-dir", str(memo)],
                              "farm lint flash_attn (warm)": recipe}, args.runs, ok=(0, 1))
        cold_runs = [measure(argv, ok=(0, 1)) for argv in cold.values()]
    cold_series = Series("farm lint TREE (cold)", tuple(cold_runs))
    rows = [rounds["grep -rEn (anchor)"], cold_series, rounds["farm lint TREE (warm)"],
            rounds["farm lint flash_attn (warm)"]]
    print(f"flash-attn 2.8.3 sdist at {tree.root}; arch list {ARCHS}; grep: {hits} raw hits")
    print(f"farm: {farm} (a regular install of this working tree)")
    print()
    print(table(rows))
    ratio = cold_series.cpu[0] / rounds["grep -rEn (anchor)"].cpu[0]
    warm_dir, warm_recipe = rounds["farm lint TREE (warm)"].wall[0], rounds["farm lint flash_attn (warm)"].wall[0]
    print()
    print(f"warm, directory: {warm_dir * 1000:.0f} ms wall, recipe: {warm_recipe * 1000:.0f} ms wall "
          f"(target <= 100 ms): {'met' if max(warm_dir, warm_recipe) <= 0.1 else 'NOT met'}")
    print(f"ratio cold lint / grep, CPU (min of {args.runs}): {ratio:.1f}x (target <= 4x): "
          f"{'met' if ratio <= 4 else 'NOT met'}")
    return 0 if ratio <= 4 and max(warm_dir, warm_recipe) <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
