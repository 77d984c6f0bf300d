"""`nox -s explain -- 8.0` against `farm explain 8.0`, after the session's first run.

Both are whole processes (``_harness.measure``), taking turns; the anchor is the ``farm`` of the
session's own venv, so the difference is what nox adds: its start, the venv check, the skipped
install. The first session run (which creates the venv and installs farm) is made first and
shown apart. Target: the session adds <= 1.5 s to the farm command.

    python benchmarks/bench_nox.py [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, interleaved, measure, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    nox = shutil.which("nox", path=Path(sys.executable).parent) or shutil.which("nox")
    if nox is None:
        print("nox is not installed next to this interpreter nor on PATH", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="bench-nox-") as tmp:
        # a clone of the committed tree with its own .nox: the benchmark never touches the checkout's venvs
        clone = Path(tmp) / "farm"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        session = [nox, "--non-interactive", "-s", "explain", "--", "8.0"]
        first = measure(session, cwd=clone)
        farm = clone / ".nox" / "explain" / "bin" / "farm"
        results = interleaved({"nox -s explain -- 8.0": session, "farm explain 8.0": [str(farm), "explain", "8.0"]},
                              args.runs, cwd=clone)
    print(f"first session run (creates the venv, installs farm): {first.wall_s:.1f} s wall, {first.cpu_s:.1f} s CPU")
    print()
    print(table(list(results.values())))
    session_s, farm_s = results["nox -s explain -- 8.0"], results["farm explain 8.0"]
    added = session_s.wall[0] - farm_s.wall[0]
    added_median = session_s.wall[1] - farm_s.wall[1]
    print()
    print(f"added by the session (wall, median): {added_median:.2f} s")
    print(f"added by the session (wall, min of {args.runs}): {added:.2f} s (target <= 1.5 s): "
          f"{'met' if added <= 1.5 else 'NOT met'}; ratio {session_s.wall[0] / farm_s.wall[0]:.1f}x")
    return 0 if added <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
