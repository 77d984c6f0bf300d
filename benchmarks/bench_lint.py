"""`farm lint` on the flash-attn 2.8.3 sdist (107 MB, 6,614 files), against `grep -rEn`, as processes.

Every side is a whole process (``_harness.measure``: CPU, wall, own peak RSS; min and median of
``--runs``), taking turns round by round (a burst of load on a shared machine hits all alike), the
file cache warm for all:

- anchor: ``grep -rEn`` of the raw patterns the rules look for, over the same tree;
- cold: ``farm lint TREE --arch-list L`` with an empty cache folder each run (nothing remembered);
- warm, directory: the same command again, its answer remembered (``farm.lint.memo``);
- warm, recipe: ``farm lint flash_attn --arch-list L`` in the repository, source fetched and
  answer remembered.

Every warm answer is checked to be the cold one, byte for byte. farm's own modules are inputs of a
remembered answer, and an answer is remembered only once its inputs are older than
``farm.lint.memo.RACY_NS``: the benchmark waits that long after installing farm before it primes.

Targets: cold CPU <= 4x grep's; warm <= 0.1 s (wall) for both.

    python benchmarks/bench_lint.py [--cache-dir DIR] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Run, Series, installed_farm, measure, table

sys.path.insert(0, str(REPO))
from farm.lint.memo import RACY_NS
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
    time.sleep(RACY_NS / 1e9 + 0.1)  # the fresh install's modules are inputs of every remembered answer
    anchor = [grep, "-rEn", PATTERN, str(tree.root)]
    hits = measure(anchor, ok=(0, 1)).stdout.count(b"\n")  # also warms the file cache
    labels = ("grep -rEn (anchor)", "farm lint TREE (cold)", "farm lint TREE (warm)", "farm lint flash_attn (warm)")
    runs: dict[str, list[Run]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory(prefix="bench-lint-") as tmp:
        memo = Path(tmp) / "memo"
        directory = [farm, "lint", str(tree.root), "--arch-list", ARCHS]
        recipe = [farm, "lint", "flash_attn", "--arch-list", ARCHS, "--cache-dir", str(args.cache_dir)]
        answers = {"directory": measure([*directory, "--cache-dir", str(memo)], ok=(0, 1)).stdout,
                   "recipe": measure(recipe, ok=(0, 1)).stdout}  # remembered from now on
        for i in range(args.runs):
            runs[labels[0]].append(measure(anchor, ok=(0, 1)))
            # cold: a fresh cache folder each run, so nothing is remembered
            runs[labels[1]].append(measure([*directory, "--cache-dir", str(Path(tmp) / f"cold{i}")], ok=(0, 1)))
            runs[labels[2]].append(measure([*directory, "--cache-dir", str(memo)], ok=(0, 1)))
            runs[labels[3]].append(measure(recipe, ok=(0, 1)))
        for label, answer in ((labels[1], answers["directory"]), (labels[2], answers["directory"]),
                              (labels[3], answers["recipe"])):
            if any(run.stdout != answer for run in runs[label]):
                raise SystemExit(f"{label}: an answer differs from the first one")
    series = {label: Series(label, tuple(r)) for label, r in runs.items()}
    rows = list(series.values())
    print(f"flash-attn 2.8.3 sdist at {tree.root}; arch list {ARCHS}; grep: {hits} raw hits")
    print(f"farm: {farm} (a regular install of this working tree)")
    print()
    print(table(rows))
    ratio = series[labels[1]].cpu[0] / series[labels[0]].cpu[0]
    warm_dir, warm_recipe = series[labels[2]].wall[0], series[labels[3]].wall[0]
    print()
    print(f"warm, directory: {warm_dir * 1000:.0f} ms wall, recipe: {warm_recipe * 1000:.0f} ms wall "
          f"(target <= 100 ms): {'met' if max(warm_dir, warm_recipe) <= 0.1 else 'NOT met'}")
    print(f"ratio cold lint / grep, CPU (min of {args.runs}): {ratio:.1f}x (target <= 4x): "
          f"{'met' if ratio <= 4 else 'NOT met'}")
    return 0 if ratio <= 4 and max(warm_dir, warm_recipe) <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
