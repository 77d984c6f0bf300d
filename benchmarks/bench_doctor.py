"""`farm doctor` in a user's environment against `pip list`, the command a user already runs to
see what is installed.

The environment is a regular (light) install of this working tree (``_harness.installed_farm``:
farm and its base dependencies, no build extra) plus, when a wheel is given, that wheel installed
into it (a stamped demo_ext, say: ``python -m tests.support.doctorfix OUT "8.0;8.6+PTX"`` builds one).
Timed as whole processes, taking turns:

- ``farm doctor --device 9.0 --driver 580.65.06 --json``: every distribution's metadata read, each
  extension module's fatbins read by the native reader, provenance validated, the diagnosis;
- the anchor, ``python -m pip list --format json`` in the same environment.

Target: doctor's CPU time (minimum over the runs) no more than pip list's (it reads every
distribution's metadata as pip does, plus the binaries). Measured: 0.57 (182 ms against 319 ms,
the stamped demo_ext installed). The exit status is 1 when missed.

    python benchmarks/bench_doctor.py [--wheel W.whl] [--runs 10] [--cache DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, installed_farm, interleaved, table

TARGET = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="a wheel to install into the environment first")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "bench-doctor")
    args = parser.parse_args()
    farm = installed_farm(args.cache)
    python = farm.with_name("python")
    if args.wheel:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall",
                        str(args.wheel)], check=True)
    commands = {
        "farm doctor": [str(farm), "doctor", "--device", "9.0", "--driver", "580.65.06", "--json"],
        "pip list (anchor)": [str(python), "-m", "pip", "list", "--format", "json"],
    }
    results = interleaved(commands, args.runs, ok=(0, 1))
    print(table(list(results.values())))
    ratio = results["farm doctor"].cpu[0] / results["pip list (anchor)"].cpu[0]
    print(f"farm doctor / pip list, CPU (min): {ratio:.2f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
