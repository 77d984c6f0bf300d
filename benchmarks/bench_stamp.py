"""Stamping a 250 MB wheel against a plain zipfile copy of the same wheel, in the same run.

The wheel (``--size-mb`` on disk) holds one large extension: a real nvcc-built, fatbin-bearing
shared library (when ``CUDA_HOME`` has an nvcc) after padding (three MiB of random bytes for each
MiB of repeated library bytes, so deflate works on it roughly as on a real CUDA library). Each
operation runs in its own child process so its peak RSS is its own.

Targets (issue: postbuild): stamp wall time <= 2x the copy's, stamp peak RSS < 150 MB.

    python benchmarks/bench_stamp.py [--size-mb 250] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.wheelmaker import make_wheel

KERNEL = r"""
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" void launch_scale(float *x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""

CHILD = r"""
import json, sys, time, zipfile, shutil
from pathlib import Path
op, src, dst = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
start = time.perf_counter()
if op == "copy":
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", allowZip64=True) as zout:
        for info in zin.infolist():
            with zin.open(info) as r, zout.open(info, "w") as w:
                shutil.copyfileobj(r, w, 1 << 20)
else:
    from farm.provenance.stamp import stamp_wheel
    def info(relabel, hashes):
        return {"extensions": {k: v for k, v in hashes.items() if k.endswith(".so")}}
    stamp_wheel(src, dst, local="cu130", build_tag="1", build_info=info)
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across exec.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "maxrss_kb": hwm}))
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
    tail = library or b""
    pattern = (library or os.urandom(1 << 16)) * 64
    with open(path, "wb") as fh:
        written = 0
        pad = size - len(tail)
        while written < pad:
            n = min(1 << 20, pad - written)
            # three incompressible MiBs, then a repetitive one
            chunk = os.urandom(n) if (written >> 20) % 4 != 3 else (pattern * (n // len(pattern) + 1))[:n]
            fh.write(chunk)
            written += n
        fh.write(tail)


def run_child(op: str, src: Path, dst: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", CHILD, op, str(src), str(dst)],
                          capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{op} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=250, help="the wheel's size on disk")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-stamp-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        library = real_library(work)
        ext = work / "big.so"
        # deflate leaves the random 3/4 as is and shrinks the rest to nothing
        big_extension(ext, (args.size_mb << 20) * 4 // 3, library)
        wheel = make_wheel(work / "in", "bigext", "1.0.0", {
            "bigext/__init__.py": b"",
            "bigext/_C.cpython-311-x86_64-linux-gnu.so": ext,
        }, executables=("bigext/_C.cpython-311-x86_64-linux-gnu.so",))
        ext.unlink()
        print(f"wheel: {wheel.name}, {wheel.stat().st_size / 2**20:.1f} MiB on disk, extension "
              f"{(args.size_mb * 4) // 3} MiB "
              f"({'real nvcc library appended' if library else 'no nvcc: synthetic only'})")
        copies, stamps = [], []
        for i in range(args.repeat):
            copy_dst = work / f"copy-{i}.whl"
            copies.append(run_child("copy", wheel, copy_dst))
            copy_dst.unlink()
            out = work / f"out-{i}"
            stamps.append(run_child("stamp", wheel, out))
            shutil.rmtree(out)
        copy_s = min(c["seconds"] for c in copies)
        stamp_s = min(s["seconds"] for s in stamps)
        copy_rss = max(c["maxrss_kb"] for c in copies) / 1024
        stamp_rss = max(s["maxrss_kb"] for s in stamps) / 1024
        ratio = stamp_s / copy_s
        print(f"zipfile copy : {copy_s:7.2f} s (best of {args.repeat}), peak RSS {copy_rss:6.1f} MiB")
        print(f"stamp        : {stamp_s:7.2f} s (best of {args.repeat}), peak RSS {stamp_rss:6.1f} MiB")
        print(f"ratio stamp/copy: {ratio:.2f}x (target <= 2.00x): {'ok' if ratio <= 2 else 'MISSED'}")
        print(f"stamp peak RSS: {stamp_rss:.1f} MiB (target < 150 MiB): {'ok' if stamp_rss < 150 else 'MISSED'}")
        return 0 if ratio <= 2 and stamp_rss < 150 else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
