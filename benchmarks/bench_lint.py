"""The arch-gate lint on the flash-attn 2.8.3 sdist (107 MB, 6,614 files), against its anchor.

Anchor: ``grep -rEn`` of the same raw patterns over the same tree, in the same run (file cache warm
for both). Prints the cold lint time (no lint cache) as a ratio to grep's, and the warm run (source
and result cached: what a re-run of the matrix pays). Targets: cold <= 15x grep; warm <= 0.1 s.

    python benchmarks/bench_lint.py [--cache-dir DIR] [--repeat N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from farm.lint import lint_cached, lint_tree
from farm.model.arch import ArchList
from farm.model.config import SdistSource
from farm.source.fetch import fetch

REPO = Path(__file__).resolve().parent.parent
FLASH_ATTN = SdistSource("flash-attn", "2.8.3", "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d")
ARCHS = "8.0 9.0 10.0 12.0+PTX"
# The raw patterns the rules look for, as a maintainer would grep for them.
PATTERN = (r"__CUDA_ARCH|NV_IF_TARGET|NV_IF_ELSE_TARGET|NV_DISPATCH_TARGET|NV_PROVIDES_SM_|NV_HAS_FEATURE_SM_|"
           r"[eE]4[mM]3|[eE]5[mM]2|sm_[0-9]+|compute_[0-9]+|-gencode|-arch|TORCH_CUDA_ARCH_LIST|"
           r"CMAKE_CUDA_ARCHITECTURES|CUDA_ARCHITECTURES|CUDAARCHS")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache", help="source cache (default: REPO/.cache)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        print("grep is not installed: no anchor", file=sys.stderr)
        return 3

    tree = fetch(FLASH_ATTN, args.cache_dir, package="flash_attn")
    archs = ArchList.parse(ARCHS)
    argv = [grep, "-rEn", PATTERN, str(tree.root)]
    hits = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False).stdout.count("\n")

    def run_grep() -> None:
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)

    run_grep()  # warm the file cache for both sides

    t_grep = best(run_grep, args.repeat)
    report = lint_tree(tree.root, archs)
    t_cold = best(lambda: lint_tree(tree.root, archs), args.repeat)

    with tempfile.TemporaryDirectory() as tmp:
        lint_cache = Path(tmp)
        lint_cached(tree, archs, (), lint_cache)  # fill the result cache
        t_warm = best(lambda: lint_cached(fetch(FLASH_ATTN, args.cache_dir), archs, (), lint_cache), args.repeat)

    ratio = t_cold / t_grep
    print(f"flash-attn 2.8.3 sdist: {report.scope['files_total']} files, {report.scope['compiled']} compiled; "
          f"arch list {ARCHS}")
    print(f"grep -rEn (anchor):   {t_grep * 1000:8.1f} ms   {hits} raw hits")
    print(f"lint, cold:           {t_cold * 1000:8.1f} ms   {len(report.errors)} errors, {len(report.infos)} infos"
          f"   ratio {ratio:.1f}x grep (target <= 15x) {'OK' if ratio <= 15 else 'MISSED'}")
    print(f"lint, warm (cached):  {t_warm * 1000:8.1f} ms   (target <= 100 ms) {'OK' if t_warm <= 0.1 else 'MISSED'}")
    return 0 if ratio <= 15 and t_warm <= 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
