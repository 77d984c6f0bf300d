"""What a build job pays besides compiling: ``farm build`` of real cells, its phases timed.

Runs ``farm build PKG [cell filters] --builder native --overwrite`` as a whole process, stamps each
line it prints with the time it came, and splits the run at farm's own progress lines:

    set-up       from the start to "Python X.Y (...)": spec, preflight, source, toolkit check
    environment  to the build command ("python -m build"): the build environment, torch installed
                 when the environment is new (reused otherwise)
    compile      to "auditwheel repair": the package's build (every compile step; cached ones cost
                 a fraction of a compile)
    repair       to the compiler cache's line: auditwheel and the vendoring check
    assertion    to "installing ... into a fresh environment": both readers, the stamp
    import check to the end: the wheel (and torch, for a torch-linked cell) installed into a fresh
                 environment and imported

It prints one row per cell with the wall seconds of each phase, the CPU seconds of the whole
process tree and the load average before and after (the host is shared: say so with the numbers).
The simulation's fixed per-job costs (farm/simulate/inputs.json) come from these rows.

Usage: python benchmarks/report_job_costs.py --cache-dir DIR [--root ROOT] -- PKG --cuda 13.0 ... [-- PKG ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

# (phase, the line that ends it): each phase runs from the previous marker to its own
PHASES = (("set-up", ": Python "), ("environment", ": python -m build"), ("compile", ": auditwheel repair"),
          ("repair", ": compile cache ("), ("assertion", "into a fresh environment"))


def timed_build(argv: list[str], root: Path, cache_dir: Path) -> dict[str, object]:
    """One ``farm build`` with its phases (seconds) and the CPU its process tree used."""
    cmd = [sys.executable, "-m", "farm.cli", "build", *argv, "--builder", "native", "--overwrite", "--root", str(root),
           "--cache-dir", str(cache_dir), "--out", str(cache_dir / "job-costs-wheels")]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.monotonic()
    marks: dict[str, float] = {}
    lines: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            for name, marker in PHASES:
                if name not in marks and marker in line:
                    marks[name] = time.monotonic() - start
    end = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"farm build {' '.join(argv)} exited {proc.returncode}:\n{''.join(lines[-40:])}")
    # each phase ends where the next one's marker is: set-up ends at "Python", ...
    bounds = [0.0, *(marks.get(name, float("nan")) for name, _ in PHASES), end]
    names = [name for name, _ in PHASES] + ["import check"]
    phases = {n: round(b - a, 1) for n, a, b in zip(names, bounds[:-1], bounds[1:], strict=True)}
    return {"cell": " ".join(argv), "phases": phases, "wall_s": round(end, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1),
            "reused_environment": any("reusing build environment" in ln for ln in lines),
            "cache": next((ln.split(": compile cache (sccache): ")[1].strip() for ln in lines
                           if ": compile cache (sccache): " in ln), None)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("cells", nargs=argparse.REMAINDER, help="-- PKG [filters] [-- PKG [filters] ...]")
    args = parser.parse_args()
    groups: list[list[str]] = [[]]
    for word in args.cells:
        if word == "--":
            groups.append([])
        else:
            groups[-1].append(word)
    rows = [timed_build(g, args.root, args.cache_dir) for g in groups if g]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    names = [name for name, _ in PHASES] + ["import check"]
    print(f"{'cell':<60} " + " ".join(f"{n:>12}" for n in names) + f" {'wall':>7} {'cpu':>7}  load")
    for r in rows:
        phases = r["phases"]
        assert isinstance(phases, dict)
        print(f"{str(r['cell'])[:60]:<60} " + " ".join(f"{phases[n]:>12}" for n in names)
              + f" {r['wall_s']:>7} {r['cpu_s']:>7}  {r['load_before']}-{r['load_after']}")
        print(f"    environment reused: {r['reused_environment']}; compiler cache: {r['cache']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
