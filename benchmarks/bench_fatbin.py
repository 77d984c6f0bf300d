"""The native fatbin reader against cuobjdump on NVIDIA's largest fatbin-bearing PyPI library.

Downloads ``nvidia-cublas`` (CUDA 13; ``--cuda 12`` for ``nvidia-cublas-cu12``) once into
``.cache/bench/``, extracts ``libcublasLt.so.*``, then runs, as whole processes, the native reader
(``python -S -m farm.binary.fatbin``, its bytecode cached as an installed package's is; also shown
without) and ``cuobjdump --list-elf --list-ptx`` (the anchor). Both must list
identical entries (SASS compared without ``f``). Prints wall time and peak RSS of both and the
ratios; the targets are native >= 50x faster and <= 1/10 of cuobjdump's peak memory. Each side
runs ``--runs`` times: the fastest wall time and the highest peak RSS are reported.

    python benchmarks/bench_fatbin.py [--cuda 13|12] [--runs 3] [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from farm.binary.cuobjdump import (
    cuobjdump_version,
    find_cuobjdump,
    parse_listing,
    variant_free,
)
from farm.binary.fatbin import EntryKind, read_fatbins, runnable
from farm.binary.fatbinscan import scan
from farm.binary.wheelfile import SafeWheel

PACKAGES = {"13": "nvidia-cublas", "12": "nvidia-cublas-cu12"}


@dataclass(frozen=True)
class Run:
    wall_s: float
    peak_rss_mb: float
    stdout: str


def measure(argv: list[str], env: dict[str, str] | None = None) -> Run:
    """Wall time and peak RSS of one whole process (os.wait4 gives the child's own rusage)."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: stderr cannot block the child
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env)
        assert proc.stdout is not None
        out = proc.stdout.read()  # read before waiting so a large listing cannot block on a full pipe
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed (rc {proc.returncode}): "
                             f"{err.read().decode(errors='replace')[-500:]}")
    return Run(wall, usage.ru_maxrss / 1024, out.decode())


def best(argv: list[str], runs: int, env: dict[str, str] | None = None) -> Run:
    results = [measure(argv, env) for _ in range(runs)]
    fastest = min(results, key=lambda r: r.wall_s)
    return Run(fastest.wall_s, max(r.peak_rss_mb for r in results), fastest.stdout)


def fetch_library(cuda: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    package = PACKAGES[cuda]
    prefix = package.replace("-", "_")
    wheels = sorted(cache.glob(f"{prefix}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", str(cache), package], check=True)
        wheels = sorted(cache.glob(f"{prefix}-*.whl"))
    wheel = wheels[-1]
    with SafeWheel(wheel) as w:
        members = [n for n in w.names() if Path(n).name.startswith("libcublasLt.so")]
        if not members:
            raise SystemExit(f"{wheel} holds no libcublasLt.so")
        member = max(members, key=len)
        out = cache / f"{wheel.stem}-{Path(member).name}"
        if not out.exists():
            w.extract(member, out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuda", choices=sorted(PACKAGES), default="13")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "bench")
    args = parser.parse_args()

    lib = fetch_library(args.cuda, args.cache)
    tool = find_cuobjdump()
    fatbins = read_fatbins(lib)
    entries = sum(len(f.entries) for f in fatbins)
    print(f"library:   {lib.name} ({lib.stat().st_size / 1e6:.0f} MB, {len(fatbins)} fatbins, {entries} entries)")
    print(f"cuobjdump: {tool} ({cuobjdump_version(tool)})")

    # warm the page cache once so neither side pays for the first read from disk
    measure([str(tool), "--list-elf", "--list-ptx", str(lib)])
    # -S: the reader needs only the standard library, so the interpreter skips site-packages
    # (farm is found from the repository root, the working directory of the run). Its bytecode is
    # cached (outside the repository) as an installed package's is; the run that compiles farm's
    # modules every time is shown too.
    command = [sys.executable, "-S", "-m", "farm.binary.fatbin", str(lib)]
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(args.cache / "pycache")
    measure(command, cached)
    native = best(command, args.runs, cached)
    uncached = best(command, args.runs, {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    scan_s = min(_timed(scan, lib) for _ in range(args.runs))
    in_process = min(_timed(read_fatbins, lib) for _ in range(args.runs))
    anchor = best([str(tool), "--list-elf", "--list-ptx", str(lib)], args.runs)
    # the floor of any Python command on this machine, measured in the same run
    bare = best([sys.executable, "-S", "-c", "pass"], args.runs)

    # identical answers: the native process's entries against cuobjdump's, one per TU per arch
    if uncached.stdout != native.stdout:
        print("MISMATCH: the listing differs between runs")
        return 1
    loaded = {f.section for f in runnable(fatbins)}
    native_set: Counter[tuple[str, str]] = Counter()
    for line in native.stdout.splitlines():
        _, section, _, kind, name, _ = line.split("\t")
        if kind != EntryKind.LTO_IR.value and section in loaded:
            native_set[(kind, name)] += 1
    native_cmp: Counter[tuple[str, str]] = Counter()
    for (kind, name), count in native_set.items():
        native_cmp[(kind, variant_free_name(name))] += count
    listed = Counter((e.kind.value, e.target.name) for e in parse_listing(anchor.stdout, where=str(lib)))
    if native_cmp != listed:
        print(f"MISMATCH: native only {native_cmp - listed}; cuobjdump only {listed - native_cmp}")
        return 1
    archs = sorted({n for _, n in native_set}, key=lambda n: (int("".join(c for c in n if c.isdigit())), n))
    print(f"identical: {sum(listed.values())} entries, arch set {' '.join(archs)}")
    print()
    print(f"{'':12}{'wall':>10}{'peak RSS':>12}")
    print(f"{'native':12}{native.wall_s * 1000:>8.1f}ms{native.peak_rss_mb:>10.1f}MB")
    print(f"{'  no .pyc':12}{uncached.wall_s * 1000:>8.1f}ms{uncached.peak_rss_mb:>10.1f}MB   "
          "(farm's modules compiled on every run)")
    print(f"{'cuobjdump':12}{anchor.wall_s * 1000:>8.1f}ms{anchor.peak_rss_mb:>10.1f}MB")
    print(f"{'python -S':12}{bare.wall_s * 1000:>8.1f}ms{bare.peak_rss_mb:>10.1f}MB"
          "   (bare interpreter start: the floor)")
    print(f"(in process: the command's scan {scan_s * 1000:.1f}ms, read_fatbins with its models "
          f"{in_process * 1000:.1f}ms; the rest of the command is interpreter start, imports and output)")
    speed = anchor.wall_s / native.wall_s
    memory = native.peak_rss_mb / anchor.peak_rss_mb
    print()
    print(f"speed-up:     {speed:.1f}x   (target >= 50x: {'met' if speed >= 50 else 'NOT met'}; "
          f"no .pyc: {anchor.wall_s / uncached.wall_s:.1f}x)")
    print(f"memory ratio: {memory:.3f}   (target <= 0.100: {'met' if memory <= 0.1 else 'NOT met'})")
    print(f"in process:   {anchor.wall_s / in_process:.1f}x   (cuobjdump's whole run / the native read alone)")
    return 0


def _timed(read: Callable[[Path], object], lib: Path) -> float:
    start = time.perf_counter()
    read(lib)
    return time.perf_counter() - start


def variant_free_name(name: str) -> str:
    from farm.model.arch import Target

    return variant_free(Target.from_name(name)).name


if __name__ == "__main__":
    sys.exit(main())
