"""Build CUDA extensions with setuptools and nvcc, without torch.

It does what ``torch.utils.cpp_extension`` does for an extension's ``.cu`` sources: compile them
with ``$CUDA_HOME/bin/nvcc`` using the arch flags ``TORCH_CUDA_ARCH_LIST`` asks for, then link
everything with the host C++ compiler (no nvcc device link, hence no device-link stub fatbin).
``TORCH_CUDA_ARCH_LIST`` is read exactly as torch reads it:

- items separated by ``;`` or spaces, each ``X.Y`` (``a`` where torch allows it) with optional
  ``+PTX``; torch's arch names (``Ampere``, ``Hopper``, ...) are substituted first;
- any user nvcc flag containing ``arch`` makes the variable be ignored (no arch flags added);
- unset, empty or ``native`` means "the visible GPUs" in torch; a build machine has none, so
  that is an error here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Extension
from setuptools.command.build_ext import build_ext

# torch/utils/cpp_extension.py (_get_cuda_arch_flags, torch 2.13): replaced in this order, case-sensitive.
NAMED_ARCHES = (
    ("Kepler+Tesla", "3.7"),
    ("Kepler", "3.5+PTX"),
    ("Maxwell+Tegra", "5.3"),
    ("Maxwell", "5.0;5.2+PTX"),
    ("Pascal", "6.0;6.1+PTX"),
    ("Volta+Tegra", "7.2"),
    ("Volta", "7.0+PTX"),
    ("Turing", "7.5+PTX"),
    ("Ampere+Tegra", "8.7"),
    ("Ampere", "8.0;8.6+PTX"),
    ("Ada", "8.9+PTX"),
    ("Hopper", "9.0+PTX"),
    ("Blackwell+Tegra", "11.0"),
    ("Blackwell", "10.0;10.3;12.0;12.1+PTX"),
)

SUPPORTED_ARCHES = (
    "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5", "8.0", "8.6",
    "8.7", "8.9", "9.0", "9.0a", "10.0", "10.0a", "10.3", "10.3a", "11.0", "11.0a", "12.0",
    "12.0a", "12.1", "12.1a",
)


class ArchListError(ValueError):
    pass


def arch_flags(user_nvcc_flags: list[str], environ: os._Environ[str] | dict[str, str] = os.environ) -> list[str]:
    """The ``-gencode`` flags torch would add for ``TORCH_CUDA_ARCH_LIST``."""
    if any("arch" in flag and "TORCH_EXTENSION_NAME" not in flag for flag in user_nvcc_flags):
        return []  # torch's rule: the user chose arches with their own flags
    raw = environ.get("TORCH_CUDA_ARCH_LIST", "")
    if not raw.strip() or raw.strip() == "native":
        raise ArchListError(
            "TORCH_CUDA_ARCH_LIST is unset, empty or 'native': torch would use the visible GPUs' "
            "capabilities, and a build machine has none. Set it, e.g. "
            "TORCH_CUDA_ARCH_LIST='8.0;8.6;9.0+PTX'"
        )
    text = raw.replace(" ", ";")
    for name, value in NAMED_ARCHES:
        text = text.replace(name, value)
    flags: list[str] = []
    for item in text.split(";"):
        base = item.removesuffix("+PTX")
        if base not in SUPPORTED_ARCHES:
            raise ArchListError(f"Unknown CUDA arch ({item!r}) in TORCH_CUDA_ARCH_LIST={raw!r}")
        num = base.replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if item.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return sorted(set(flags))


def cuda_home() -> Path:
    """``CUDA_HOME`` (or ``CUDA_PATH``), else the toolkit that holds the ``nvcc`` on PATH."""
    for name in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(name)
        if value:
            home = Path(value)
            if not (home / "bin" / "nvcc").exists():
                raise RuntimeError(f"{name}={value} has no bin/nvcc")
            return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(nvcc).resolve().parent.parent
    raise RuntimeError("no CUDA toolkit: set CUDA_HOME to a toolkit with bin/nvcc")


class CUDAExtension(Extension):
    """An extension whose ``.cu`` sources go through nvcc; ``nvcc_flags`` are the user's flags."""

    def __init__(self, name: str, sources: list[str], *, nvcc_flags: list[str] | None = None, **kwargs: Any) -> None:
        home = cuda_home()
        kwargs.setdefault("language", "c++")
        kwargs.setdefault("libraries", []).extend(["cudart_static", "rt", "pthread", "dl"])
        kwargs.setdefault("library_dirs", []).append(str(home / "lib64"))
        super().__init__(name, sources, **kwargs)
        self.nvcc_flags = list(nvcc_flags or [])
        self.cuda_home = home


class BuildExtension(build_ext):
    """Compiles ``.cu`` with nvcc (in parallel, ``MAX_JOBS``), the rest with setuptools."""

    def build_extension(self, ext: Extension) -> None:
        if isinstance(ext, CUDAExtension):
            cu = [s for s in ext.sources if s.endswith(".cu")]
            ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
            ext.extra_objects = list(ext.extra_objects or []) + self._nvcc_compile(ext, cu)
        super().build_extension(ext)

    def _nvcc_compile(self, ext: CUDAExtension, sources: list[str]) -> list[str]:
        flags = arch_flags(ext.nvcc_flags)
        # torch's ninja build runs $PYTORCH_NVCC (a command, e.g. a compiler launcher) in place
        # of $CUDA_HOME/bin/nvcc when it is set; so does this one.
        nvcc = shlex.split(os.environ.get("PYTORCH_NVCC", "")) or [str(ext.cuda_home / "bin" / "nvcc")]
        includes = [f"-I{d}" for d in ext.include_dirs]
        out_dir = Path(self.build_temp) / "cuda"
        out_dir.mkdir(parents=True, exist_ok=True)
        jobs = [
            (src, out_dir / (Path(src).with_suffix("").as_posix().replace("/", "_") + ".o"))
            for src in sources
        ]

        def compile_one(job: tuple[str, Path]) -> str:
            src, obj = job
            cmd = [*nvcc, "-c", src, "-o", str(obj), "-Xcompiler", "-fPIC", "-O2", "-std=c++17",
                   *includes, *flags, *ext.nvcc_flags]
            print(shlex.join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            return str(obj)

        workers = max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(compile_one, jobs))
