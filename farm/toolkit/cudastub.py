"""The link-time stand-in for the CUDA driver, ``lib/stubs/libcuda.so``, made from the toolkit's ``cuda.h``.

NVIDIA's toolkits carry one (the ``cuda_cudart`` archive, the devel images): a shared library
with SONAME ``libcuda.so.1`` whose every driver API function returns
``CUDA_ERROR_STUB_LIBRARY``, so an extension that calls the driver API links with ``-lcuda`` on a
host without the driver, and loads the user's real ``libcuda.so.1`` at import. NVIDIA's PyPI
wheels ship none. The stub must define the functions: with ``-Wl,--as-needed`` (Ubuntu's gcc
default) a library that resolves no symbol is dropped from ``DT_NEEDED``.

Only the standard library is used: :func:`farm.toolkit.assemble.install_script` runs this file
with the container's Python, where farm is not installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STUB = "lib/stubs/libcuda.so"  # lib64 -> lib, so lib64/stubs too: where torch's -L and CMake look
SONAME = "libcuda.so.1"
CUDA_ERROR_STUB_LIBRARY = 34
FAILED = "cannot make the link-time libcuda stub"  # how a failure begins, here and in the install script's output

_DECLARED = re.compile(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(")
_RENAMED = re.compile(r"^\s*#\s*define\s+cu\w+\s+(cu\w+)\s*$", re.MULTILINE)  # cuMemAlloc -> cuMemAlloc_v2
_PER_THREAD = re.compile(r"__CUDA_API_PT(DS|SZ)\(\s*(cu\w+)\s*\)")  # cuMemcpy -> cuMemcpy_ptds


class StubError(Exception):
    """The stub cannot be made (no cuda.h functions, no C compiler, the compiler failed)."""


def driver_functions(header: str) -> tuple[str, ...]:
    """The driver API's exported names as ``cuda.h`` declares them: each ``CUresult CUDAAPI
    cuX(`` function, each ``#define cuX cuX_v2`` target and each per-thread ``_ptds``/``_ptsz``
    variant, sorted."""
    names = set(_DECLARED.findall(header)) | set(_RENAMED.findall(header))
    names |= {f"{name}_pt{kind.lower()}" for kind, name in _PER_THREAD.findall(header)}
    return tuple(sorted(names))


def stub_source(header: str) -> str:
    """C source of the stub: every function of ``header`` returning ``CUDA_ERROR_STUB_LIBRARY``.
    The arguments are not declared: a caller's arguments are ignored and the result is an int."""
    names = driver_functions(header)
    if not names:
        raise StubError("cuda.h declares no driver API function (no `CUresult CUDAAPI cu...(`)")
    lines = ["/* Link-time stand-in for libcuda.so.1, generated from cuda.h: never loaded at run time. */"]
    lines += [f"int {name}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}" for name in names]
    return "\n".join(lines) + "\n"


def compiler() -> str:
    """The host C compiler: ``cc``, else ``gcc``."""
    found = shutil.which("cc") or shutil.which("gcc")
    if found is None:
        raise StubError("no C compiler (cc or gcc) on PATH; install gcc")
    return found


def build_stub(home: Path) -> Path | None:
    """Make ``home/lib/stubs/libcuda.so`` from ``home/include/cuda.h``; the stub path, or None where
    the toolkit has no ``cuda.h`` (no cudart: nothing can call the driver). An existing stub
    (NVIDIA's, in the redist archive) is left as it is."""
    stub, header = home / STUB, home / "include" / "cuda.h"
    if stub.exists():
        return stub
    if not header.is_file():
        return None
    source = stub_source(header.read_text(encoding="utf-8", errors="replace"))
    stub.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=stub.parent) as tmp:
        c_file, out = Path(tmp) / "libcuda_stub.c", Path(tmp) / "libcuda.so"
        c_file.write_text(source, encoding="utf-8")
        cmd = [compiler(), "-shared", "-fPIC", "-O0", f"-Wl,-soname,{SONAME}", "-o", str(out), str(c_file)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise StubError(f"compiling the libcuda stub failed (rc {proc.returncode}): {' '.join(cmd)}\n"
                            + (proc.stderr or proc.stdout).strip()[-2000:])
        out.replace(stub)
    return stub


def failure(exc: StubError | OSError) -> str:
    """What went wrong making the stub, and what to do where that is known."""
    return f"{FAILED}: {exc}"


def main(argv: list[str]) -> int:
    """``python cudastub.py CUDA_HOME``: the install script's step."""
    try:
        build_stub(Path(argv[0]))
    except (StubError, OSError) as exc:
        print(f"farm: {failure(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
