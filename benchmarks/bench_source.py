"""A source tree taken from the cache is re-hashed before use: its cost on a flash-attn-sized tree.

A cached source (``farm.source.fetch``) may come back from an Actions cache or an earlier job, so
every file is hashed again against the digest sealed at its install (``content_digest``) before the
lint or a build reads it. Every side is a whole process (``_harness.measure``), taking turns round
by round, the file cache warm for all:

- anchor: ``sha256sum`` of every file of the tree, one process (the floor of reading every byte);
- for scale: ``cp -a`` of the tree, the copy every build makes of it anyway (``prepare_source``);
- farm: ``farm lint PKG --arch-list L`` of a recipe whose git source is in the source cache and
  whose lint answer is in the lint cache, its remembered answer removed before each run: the
  source is found, verified and its lint answer read back (what ``farm matrix`` does per package).

Every run's answer is checked to be the first one, byte for byte. Target: farm's CPU at most twice
the anchor's (the plain re-hash stays near the cost of reading the bytes once).

    python benchmarks/bench_source.py [--tree DIR] [--cache-dir DIR] [--runs 5]

Without ``--tree`` the tree is the flash-attn 2.8.3 sdist (``bench_lint.py``'s, 107 MB).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, Run, Series, installed_farm, measure, table
from bench_lint import FLASH_ATTN

sys.path.insert(0, str(REPO))
from farm.lint.memo import RACY_NS
from farm.source.fetch import content_digest, fetch

ARCHS = "8.0 9.0"
RECIPE = """\
name: big
version: '1.0'
source:
  git: {{repo: '{url}', ref: v1}}
links_torch: false
"""


def _repository(tree: Path, where: Path) -> str:
    """``tree`` committed and tagged ``v1`` in a new repository at ``where``; its file URL."""
    shutil.copytree(tree, where, symlinks=True, ignore=shutil.ignore_patterns(".git"))

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(where), "-c", "user.name=bench", "-c", "user.email=bench@example.org",
                        *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A", "-f")
    git("commit", "-qm", "tree")
    git("tag", "v1")
    return where.as_uri()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="the source tree to measure (default: the flash-attn sdist)")
    parser.add_argument("--cache-dir", type=Path, default=REPO / ".cache", help="sdist cache (default: REPO/.cache)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tree = args.tree or fetch(FLASH_ATTN, args.cache_dir, package="flash_attn").root
    farm = str(installed_farm(args.cache_dir / "bench"))
    time.sleep(RACY_NS / 1e9 + 0.1)  # the fresh install's modules are inputs of every remembered answer
    labels = ("sha256sum FILES (anchor)", "cp -a TREE", "farm lint PKG (source verified)")
    runs: dict[str, list[Run]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory(prefix="bench-source-") as tmp:
        root, cache = Path(tmp) / "farm", Path(tmp) / "cache"
        (root / "packages").mkdir(parents=True)
        shutil.copy(REPO / "_defaults.yml", root)
        (root / "ledger.jsonl").touch()
        (root / "packages" / "big.yml").write_text(RECIPE.format(url=_repository(tree, Path(tmp) / "upstream")))
        command = [farm, "lint", "big", "--arch-list", ARCHS, "--root", str(root), "--cache-dir", str(cache)]
        answer = measure(command, ok=(0, 1)).stdout  # fetched, linted, both cached
        (cached,) = (cache / "git").glob("*/tree")
        files = sorted(str(p) for p in cached.rglob("*") if p.is_file() and not p.is_symlink())
        size = sum(Path(p).stat().st_size for p in files)
        anchor = ["sha256sum", *files]
        for _ in range(args.runs):
            runs[labels[0]].append(measure(anchor))
            copy = Path(tmp) / "copy"
            runs[labels[1]].append(measure(["cp", "-a", str(cached), str(copy)]))
            shutil.rmtree(copy)
            for memo in (cache / "lint").glob("cmd-*.bin"):  # the remembered answer: the source is read again
                memo.unlink()
            runs[labels[2]].append(measure(command, ok=(0, 1)))
        if any(run.stdout != answer for run in runs[labels[2]]):
            raise SystemExit(f"{labels[2]}: an answer differs from the first one")
        verify_s = []
        for _ in range(args.runs):
            started = time.process_time()
            content_digest(cached)
            verify_s.append(time.process_time() - started)
    series = {label: Series(label, tuple(r)) for label, r in runs.items()}
    print(f"tree: {tree} ({len(files):,} files, {size / 1e6:.0f} MB); verifying it in-process (content_digest): "
          f"{min(verify_s):.2f} s CPU (min of {args.runs})")
    print(f"farm: {farm} (a regular install of this working tree)")
    print()
    print(table(list(series.values())))
    ratio = series[labels[2]].cpu[0] / series[labels[0]].cpu[0]
    print()
    print(f"ratio farm lint (source verified) / sha256sum, CPU (min of {args.runs}): {ratio:.2f}x (target <= 2x): "
          f"{'met' if ratio <= 2 else 'NOT met'}")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
