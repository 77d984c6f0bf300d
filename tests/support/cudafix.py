"""CUDA fixtures built with the real nvcc, once per test session.

``cuda_fixtures`` (session-scoped) hands out shared objects by name, compiling each on first use
into a directory shared by the whole session (so modules that import the fixture share one build).
Each fixture records the arch list it was built to hold. Corrupt variants are derived from valid
ones by editing bytes located without farm's own reader (the fatbin magic is searched for).

Registered for every test module by ``pytest_plugins`` in tests/conftest.py.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

SOURCES: dict[str, str] = {
    "k1.cu": """
__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" void launch_scale(float *x, float a, int n) { scale<<<(n + 127) / 128, 128>>>(x, a, n); }
""",
    "k2.cu": """
__global__ void shift(float *x, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b;
}
extern "C" void launch_shift(float *x, float b, int n) { shift<<<(n + 127) / 128, 128>>>(x, b, n); }
""",
    "rdc_a.cu": """
__device__ float twice(float v);
__global__ void apply(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]);
}
extern "C" void launch_apply(float *x, int n) { apply<<<(n + 127) / 128, 128>>>(x, n); }
""",
    "rdc_b.cu": """
__device__ float twice(float v) { return 2.0f * v; }
""",
    "data.cu": """
__device__ int table[4] = {1, 2, 3, 4};
""",
    "host.cpp": """
extern "C" int host_add(int a, int b) { return a + b; }
""",
}

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)

# The usual list of the fixtures: two SASS arches and one PTX.
BASE = "8.0;9.0+PTX"


def _gencode(arch_list: str) -> list[str]:
    """nvcc flags for a ``X.Y[a|f][+PTX]`` list, written out here so the fixtures do not depend on
    the code under test."""
    flags = []
    for item in arch_list.split(";"):
        ptx = item.endswith("+PTX")
        version = item.removesuffix("+PTX")
        number = version.replace(".", "")
        codes = [f"sm_{number}"] + ([f"compute_{number}"] if ptx else [])
        if version.startswith("ptx:"):  # PTX only
            number = version[4:].replace(".", "")
            codes = [f"compute_{number}"]
        flags.append(f"-gencode=arch=compute_{number},code=[{','.join(codes)}]")
    return flags


@dataclass(frozen=True)
class Spec:
    """How one fixture is made and what it must hold (``None``: no device code / not valid)."""

    build: Callable[[CudaFixtures, Path], None]
    holds: str | None
    valid: bool = True
    headers_ok: bool = False  # corrupt payload, intact headers: only cuobjdump can tell


class CudaFixtures:
    """Builds fixtures on demand into ``root``; safe to share between modules and processes."""

    def __init__(self, nvcc: Path, cuda_home: Path, root: Path) -> None:
        self.nvcc = nvcc
        self.cuda_home = cuda_home
        self.root = root
        self.src = root / "src"
        self.src.mkdir(parents=True, exist_ok=True)
        for name, text in SOURCES.items():
            (self.src / name).write_text(text)

    # -- tools ------------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> None:
        env = dict(os.environ, CUDA_HOME=str(self.cuda_home))
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=self.root, env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"fixture build failed: {' '.join(argv)}\n{proc.stdout}\n{proc.stderr}")

    def nvcc_c(self, source: str, flags: list[str], out: str) -> Path:
        """``nvcc -c`` once per (source, flags): the object is shared by the fixtures that link it."""
        obj = self.root / out
        with FileLock(str(obj) + ".lock"):
            if not obj.exists():
                tmp = obj.with_suffix(".tmp.o")
                self._run([str(self.nvcc), "-c", "-Xcompiler", "-fPIC", *flags, "-o", str(tmp),
                           str(self.src / source)])
                tmp.replace(obj)
        return obj

    def gxx_link(self, objects: list[Path], out: Path) -> None:
        """Link as torch does: the host compiler, no device link (no stub)."""
        self._run([shutil.which("g++") or "g++", "-shared", "-o", str(out), *map(str, objects)])

    def nvcc_link(self, objects: list[Path], flags: list[str], out: Path) -> None:
        """Link with nvcc: a device link runs and adds its stub fatbin."""
        self._run([str(self.nvcc), "-shared", "-Xcompiler", "-fPIC", *flags, "-o", str(out), *map(str, objects)])

    # -- fixtures ---------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        """The fixture ``name``, built if needed."""
        spec = FIXTURES[name]
        out = self.root / f"{name}.cpython-311-x86_64-linux-gnu.so"
        with FileLock(str(out) + ".lock"):
            if not out.exists():
                tmp = self.root / f"tmp-{name}.so"
                spec.build(self, tmp)
                tmp.replace(out)
        return out

    def holds(self, name: str) -> str | None:
        return FIXTURES[name].holds


def _compressed(mode: str) -> Callable[[CudaFixtures, Path], None]:
    flag = ["-Xfatbin", "-compress-all"] if mode == "compress-all" else [f"--compress-mode={mode}"]

    def build(fx: CudaFixtures, out: Path) -> None:
        fx.gxx_link([fx.nvcc_c("k1.cu", _gencode(BASE) + flag, f"k1-{mode}.o")], out)

    return build


def _k1(fx: CudaFixtures) -> Path:
    return fx.nvcc_c("k1.cu", _gencode(BASE) + ["--compress-mode=default"], "k1-default.o")


def _two_tu(fx: CudaFixtures, out: Path) -> None:
    fx.gxx_link([_k1(fx), fx.nvcc_c("k2.cu", _gencode(BASE), "k2.o")], out)


def _tu_mismatch(fx: CudaFixtures, out: Path) -> None:
    fx.gxx_link([_k1(fx), fx.nvcc_c("k2.cu", _gencode("8.0"), "k2-sm80.o")], out)


def _families(fx: CudaFixtures, out: Path) -> None:
    """Two kernel families in one .so: k1 for the base list, k2 for 9.0a alone (as vLLM's CMake does)."""
    fx.gxx_link([_k1(fx), fx.nvcc_c("k2.cu", _gencode("9.0a"), "k2-sm90a.o")], out)


def _nvcc_link(fx: CudaFixtures, out: Path) -> None:
    fx.nvcc_link([_k1(fx), fx.nvcc_c("k2.cu", _gencode(BASE), "k2.o")], _gencode(BASE), out)


def _nvcc_link_default(fx: CudaFixtures, out: Path) -> None:
    fx.nvcc_link([_k1(fx), fx.nvcc_c("k2.cu", _gencode(BASE), "k2.o")], [], out)


def _single(source: str, flags: list[str], obj: str) -> Callable[[CudaFixtures, Path], None]:
    def build(fx: CudaFixtures, out: Path) -> None:
        fx.gxx_link([fx.nvcc_c(source, flags, obj)], out)

    return build


def _rdc(fx: CudaFixtures, out: Path) -> None:
    fx._run([str(fx.nvcc), "-shared", "-rdc=true", "-Xcompiler", "-fPIC", *_gencode(BASE), "-o", str(out),
             str(fx.src / "rdc_a.cu"), str(fx.src / "rdc_b.cu")])


def _host_only(fx: CudaFixtures, out: Path) -> None:
    fx._run([shutil.which("g++") or "g++", "-shared", "-fPIC", "-o", str(out), str(fx.src / "host.cpp")])


def _text(fx: CudaFixtures, out: Path) -> None:
    out.write_text("this is not a shared library\n")


def _truncated(fx: CudaFixtures, out: Path) -> None:
    data = fx.path("default").read_bytes()
    out.write_bytes(data[: len(data) * 3 // 5])


def _patched(edit: Callable[[bytearray, int], None]) -> Callable[[CudaFixtures, Path], None]:
    """A copy of the default fixture with its first fatbin header (found by its magic) edited."""

    def build(fx: CudaFixtures, out: Path) -> None:
        data = bytearray(fx.path("default").read_bytes())
        at = data.find(FATBIN_MAGIC)
        assert at > 0, "no fatbin magic in the default fixture"
        edit(data, at)
        out.write_bytes(bytes(data))

    return build


def _bad_magic(data: bytearray, at: int) -> None:
    data[at : at + 4] = struct.pack("<I", 0xDEADBEEF)


def _oversized_entry(data: bytearray, at: int) -> None:
    entry = at + 16
    struct.pack_into("<Q", data, entry + 8, 0x7FFF_FFFF)  # payload size far past the fatbin


def _unknown_kind(data: bytearray, at: int) -> None:
    entry = at + 16
    struct.pack_into("<H", data, entry, 5)


def _oversized_fatbin(data: bytearray, at: int) -> None:
    struct.pack_into("<Q", data, at + 8, 0x7FFF_FFFF)


def _bad_payload(fx: CudaFixtures, out: Path) -> None:
    """The default fixture with bytes of its zstd-compressed PTX flipped; headers untouched."""
    data = bytearray(fx.path("default").read_bytes())
    zstd = data.find(b"\x28\xb5\x2f\xfd", data.find(FATBIN_MAGIC))
    assert zstd > 0, "no zstd frame in the default fixture"
    for i in range(zstd + 8, zstd + 40):
        data[i] ^= 0x5A
    out.write_bytes(bytes(data))


FIXTURES: dict[str, Spec] = {
    # compression modes (raw cubins and zstd PTX by default, docs/background.md "nvcc"): one TU each,
    # host-linked
    "none": Spec(_compressed("none"), BASE),
    "default": Spec(lambda fx, out: fx.gxx_link([_k1(fx)], out), BASE),
    "speed": Spec(_compressed("speed"), BASE),
    "size": Spec(_compressed("size"), BASE),
    "compress-all": Spec(_compressed("compress-all"), BASE),
    # translation units and links
    "two-tu": Spec(_two_tu, BASE),
    "tu-mismatch": Spec(_tu_mismatch, BASE),  # k2 holds sm_80 only
    "families": Spec(_families, BASE + ";9.0a"),  # k1: BASE, k2: 9.0a
    "nvcc-link": Spec(_nvcc_link, BASE),  # stub of sm_80 + sm_90 empty cubins
    "nvcc-link-default": Spec(_nvcc_link_default, BASE + ";7.5"),  # stub: nvcc's default sm_75
    # variants and kinds
    "sm90a": Spec(_single("k1.cu", _gencode("9.0a+PTX"), "k1-sm90a.o"), "9.0a+PTX"),
    "family": Spec(_single("k1.cu", _gencode("10.0f;12.0f+PTX"), "k1-family.o"), "10.0f;12.0f+PTX"),
    "ptx-only": Spec(_single("k1.cu", _gencode("ptx:8.0"), "k1-ptx.o"), "compute_80"),
    "nvcc-default": Spec(_single("k1.cu", [], "k1-nvcc-default.o"), "7.5+PTX"),
    "rdc": Spec(_rdc, "8.0;9.0"),
    # line information changes how cuobjdump names the entries (no ``.<n>`` index)
    "lineinfo": Spec(_single("k1.cu", [*_gencode(BASE), "-lineinfo"], "k1-lineinfo.o"), BASE),
    "device-debug": Spec(_single("k1.cu", [*_gencode(BASE), "-G"], "k1-debug.o"), BASE),  # the device link keeps SASS only; compute_90 stays in __nv_relfatbin
    # no device code
    "host-only": Spec(_host_only, None),
    # corrupt
    "text": Spec(_text, None, valid=False),
    "truncated": Spec(_truncated, None, valid=False),
    "bad-magic": Spec(_patched(_bad_magic), None, valid=False),
    "oversized-entry": Spec(_patched(_oversized_entry), None, valid=False),
    "unknown-kind": Spec(_patched(_unknown_kind), None, valid=False),
    "oversized-fatbin": Spec(_patched(_oversized_fatbin), None, valid=False),
    "bad-payload": Spec(_bad_payload, None, valid=False, headers_ok=True),
}

VALID = [name for name, spec in FIXTURES.items() if spec.valid]
CORRUPT = [name for name, spec in FIXTURES.items() if not spec.valid]
CORRUPT_HEADERS = [name for name, spec in FIXTURES.items() if not spec.valid and not spec.headers_ok]


@pytest.fixture(scope="session")
def cuda_fixtures(nvcc: Path, cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> CudaFixtures:
    # getbasetemp() is one directory per session: modules importing this fixture share the builds.
    return CudaFixtures(nvcc, cuda_home, tmp_path_factory.getbasetemp() / "cuda-fixtures")
