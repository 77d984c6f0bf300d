"""Stamping a 250 MB wheel against a zipfile copy of it that re-compresses each member, in the same run.

The wheel is ``--size-mb`` MiB on disk: one extension of incompressible random bytes (deflate
stores them as they are) followed by a real nvcc-built library when ``CUDA_HOME`` has an nvcc. Each
operation is a whole process (``_harness.measure``: CPU, wall and the child's own peak RSS), the
two taking turns; the stamp is farm's ``stamp_wheel``, the step of ``farm postbuild`` that rewrites
the wheel, run on its own so that the assertion's cuobjdump time does not hide it.

Targets: stamp time <= 0.25x the copy's, stamp peak RSS < 150 MB; the stamped wheel verifies.

    python benchmarks/bench_stamp.py [--size-mb 250] [--runs 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO, interleaved, table

sys.path.insert(0, str(REPO))
from tests.support.wheelmaker import make_wheel

KERNEL = r"""
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" void launch_scale(float *x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""

COPY = r"""
import shutil, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", allowZip64=True) as zout:
    for info in zin.infolist():
        with zin.open(info) as r, zout.open(info, "w") as w:
            shutil.copyfileobj(r, w, 1 << 20)
"""

STAMP = r"""
import shutil, sys
from farm.provenance.stamp import stamp_wheel
src, dst = sys.argv[1], sys.argv[2]
shutil.rmtree(dst, ignore_errors=True)
def info(relabel, hashes):
    return {"extensions": {k: v for k, v in hashes.items() if k.endswith(".so")}}
stamp_wheel(src, dst, local="cu130", build_tag="1", build_info=info)
"""


def real_library(work: Path) -> bytes | None:
    cuda_home = os.environ.get("CUDA_HOME")
    nvcc = Path(cuda_home, "bin", "nvcc") if cuda_home else None
    if nvcc is None or not nvcc.exists():
        return None
    src = work / "scale.cu"
    src.write_text(KERNEL)
    out = work / "libscale.so"
    subprocess.run(
        [str(nvcc), "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_80,code=sm_80",
         "-gencode=arch=compute_90,code=[sm_90,compute_90]", "-o", str(out), str(src)],
        check=True,
    )
    return out.read_bytes()


def big_extension(path: Path, size: int, library: bytes | None) -> None:
    """``size`` bytes: random (incompressible) filler, then the real library when there is one."""
    tail = library or b""
    with open(path, "wb") as fh:
        left = size - len(tail)
        while left > 0:
            n = min(1 << 20, left)
            fh.write(os.urandom(n))
            left -= n
        fh.write(tail)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=250, help="the wheel's size on disk")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-stamp-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        library = real_library(work)
        ext = work / "big.so"
        big_extension(ext, args.size_mb << 20, library)
        wheel = make_wheel(work / "in", "bigext", "1.0.0", {
            "bigext/__init__.py": b"",
            "bigext/_C.cpython-311-x86_64-linux-gnu.so": ext,
        }, executables=("bigext/_C.cpython-311-x86_64-linux-gnu.so",))
        ext.unlink()
        print(f"wheel: {wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB on disk "
              f"({'random filler + a real nvcc library' if library else 'random filler, no nvcc'})")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        py = sys.executable
        results = interleaved({
            "zipfile copy (re-compress)": [py, "-c", COPY, str(wheel), str(work / "copy.whl")],
            "stamp (farm stamp_wheel)": [py, "-c", STAMP, str(wheel), str(work / "out")],
        }, args.runs, env=env)
        (stamped,) = (work / "out").glob("*.whl")
        subprocess.run([py, "-m", "wheel", "unpack", "-d", str(work / "unpacked"), str(stamped)], check=True,
                       capture_output=True)
        print(f"stamped wheel unpacks with `wheel unpack` (RECORD hashes checked): {stamped.name}")
        print()
        copy, stamp = results["zipfile copy (re-compress)"], results["stamp (farm stamp_wheel)"]
        print(table([copy, stamp]))
        ratio = stamp.cpu[0] / copy.cpu[0]
        wall_ratio = stamp.wall[0] / copy.wall[0]
        rss = stamp.rss[1]
        print()
        print(f"stamp peak RSS (median): {rss:.1f} MB (target < 150 MB): {'met' if rss < 150 else 'NOT met'}")
        print(f"wall ratio stamp/copy (min of {args.runs}): {wall_ratio:.3f}")
        print(f"ratio stamp/copy, CPU (min of {args.runs}): {ratio:.3f} (target <= 0.25): "
              f"{'met' if ratio <= 0.25 else 'NOT met'}")
        return 0 if ratio <= 0.25 and rss < 150 else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
