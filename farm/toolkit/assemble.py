"""A ``CUDA_HOME`` assembled from NVIDIA's PyPI wheels.

NVIDIA publishes the CUDA 13 compiler as wheels (``nvidia-cuda-nvcc``, ``-runtime``, ``-crt``,
``nvidia-nvvm``, ``-cccl``); ``pip install --target`` puts them under ``nvidia/cu13/`` (bin,
include, lib, nvvm), and nvcc compiles from there. Linking needs one more step: ``nvcc.profile``
searches ``lib64``, so ``lib64 -> lib`` must exist (FACTS §4). The CUDA 12 wheels cannot do this:
``nvidia-cuda-nvcc-cu12`` ships ``ptxas`` but no ``nvcc``, and ``nvidia-cuda-runtime-cu12`` no
``libcudart_static.a`` (measured on 12.8.93 and 12.9.86), so 12.x lines need a toolkit from the
build image.

One shell script (:func:`install_script`) does the assembly, so the host (:func:`ensure_toolkit`)
and the build container (cibuildwheel's ``before-all``) run the same steps. The host side adds a
lock, a cache stamp and an atomic rename, so a second call returns at once and an interrupted
install never leaves a half toolkit behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ToolError, UsageError

# cuobjdump's oldest wheel is 13.2.51; it reads binaries of older toolkits (FACTS §2).
_CUOBJDUMP = "nvidia-cuda-cuobjdump==13.2.51"


@dataclass(frozen=True)
class ToolkitSpec:
    """The pinned wheels that make one CUDA line's toolkit, and where they land."""

    cuda: str
    requirements: tuple[str, ...]
    home: str  # CUDA_HOME relative to the pip --target directory

    @property
    def nvcc_version(self) -> str:
        """The pinned nvcc release, e.g. ``13.0.88``."""
        for req in self.requirements:
            name, _, version = req.partition("==")
            if name == "nvidia-cuda-nvcc":
                return version
        raise AssertionError(f"toolkit spec for CUDA {self.cuda} pins no nvcc")  # table invariant

    def key(self, extra: Sequence[str] = ()) -> str:
        """Identity of an installation: changes when the pins or the extra wheels do."""
        text = json.dumps([self.cuda, sorted(self.requirements), sorted(extra), _LAYOUT_VERSION])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cu13(nvcc: str, runtime: str, crt: str, nvvm: str, cccl: str, cuobjdump: str = _CUOBJDUMP) -> tuple[str, ...]:
    return (
        f"nvidia-cuda-nvcc=={nvcc}",
        f"nvidia-cuda-runtime=={runtime}",
        f"nvidia-cuda-crt=={crt}",
        f"nvidia-nvvm=={nvvm}",
        f"nvidia-cuda-cccl=={cccl}",
        cuobjdump,
    )


# Bump when install_script's layout changes, so cached toolkits are rebuilt.
_LAYOUT_VERSION = 1

TOOLKITS: dict[str, ToolkitSpec] = {
    "13.0": ToolkitSpec("13.0", _cu13("13.0.88", "13.0.96", "13.0.88", "13.0.88", "13.0.85"), "nvidia/cu13"),
    "13.2": ToolkitSpec(
        "13.2",
        _cu13("13.2.86", "13.2.86", "13.2.86", "13.2.86", "13.2.86", "nvidia-cuda-cuobjdump==13.2.86"),
        "nvidia/cu13",
    ),
}

# Lines whose PyPI wheels cannot make a toolkit, and why (shown to the user).
_NOT_ON_PYPI = {
    "12": "NVIDIA's CUDA 12 wheels ship no nvcc binary (nvidia-cuda-nvcc-cu12 holds ptxas only) "
    "and no libcudart_static.a",
}

STAMP = ".farm-toolkit.json"


@dataclass(frozen=True)
class Toolkit:
    """A usable toolkit: export ``CUDA_HOME=cuda_home``."""

    cuda_home: Path
    nvcc: Path
    cuobjdump: Path
    version: str  # nvcc's release, e.g. "13.0.88"
    cuda: str = ""  # the CUDA line, e.g. "13.0"

    def to_json(self) -> dict[str, str]:
        return {
            "cuda": self.cuda,
            "cuda_home": str(self.cuda_home),
            "nvcc": str(self.nvcc),
            "cuobjdump": str(self.cuobjdump),
            "version": self.version,
        }


def spec_for(cuda: str) -> ToolkitSpec:
    """The pinned wheels for CUDA line ``cuda``; a clear error for lines PyPI cannot serve."""
    spec = TOOLKITS.get(cuda)
    if spec is not None:
        return spec
    reason = _NOT_ON_PYPI.get(cuda.split(".")[0])
    if reason:
        raise ToolError(
            f"CUDA {cuda} cannot be assembled from PyPI: {reason}",
            hint="build this line on a host with that toolkit installed: "
                 "farm build --builder native --cuda-home DIR",
        )
    raise UsageError(
        f"no pinned PyPI toolkit for CUDA {cuda!r}",
        hint=f"known lines: {', '.join(TOOLKITS)}; add the line's wheel pins to TOOLKITS in farm/toolkit.py",
    )


def install_script(cuda: str, prefix: str, *, python: str = "python3", extra: Sequence[str] = ()) -> str:
    """A POSIX shell script that assembles CUDA line ``cuda``'s toolkit under ``prefix``.

    ``prefix/cuda`` becomes ``CUDA_HOME``. Idempotent: a prefix stamped with the same key is left
    alone. This is cibuildwheel's ``before-all`` in the container and the core of
    :func:`ensure_toolkit` on the host.
    """
    spec = spec_for(cuda)
    key = spec.key(extra)
    q = shlex.quote
    reqs = " ".join(q(r) for r in (*spec.requirements, *extra))
    stamp = f"{prefix}/{STAMP}"
    stamp_json = json.dumps({"cuda": cuda, "key": key, "requirements": [*spec.requirements, *extra]})
    lines = [
        "set -eu",
        f"if [ -f {q(stamp)} ] && grep -q {q(key)} {q(stamp)}; then exit 0; fi",
        f"mkdir -p {q(prefix)}",
        (f"{q(python)} -m pip install --no-deps --only-binary=:all: --disable-pip-version-check "
         f"--no-input --no-compile --upgrade --target {q(prefix + '/site')} {reqs}"),
        # nvcc.profile searches lib64 for cudart/cudadevrt (FACTS §4).
        f"ln -sfn lib {q(f'{prefix}/site/{spec.home}/lib64')}",
        f"ln -sfn {q('site/' + spec.home)} {q(prefix + '/cuda')}",
        f"printf '%s\\n' {q(stamp_json)} > {q(stamp)}",
    ]
    return "\n".join(lines) + "\n"


def _read_stamp(prefix: Path) -> dict[str, object] | None:
    try:
        data = json.loads((prefix / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)")


def parse_nvcc_release(text: str) -> str:
    """``13.0.88`` from ``nvcc --version`` output (``... release 13.0, V13.0.88``)."""
    m = _NVCC_RELEASE.search(text)
    if not m:
        raise ToolError("cannot read a version from `nvcc --version`", hint=f"its output was: {text.strip()[:200]!r}")
    return m.group(2)


def nvcc_release(nvcc: Path) -> str:
    """What ``nvcc --version`` reports, e.g. ``13.0.88``."""
    try:
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"cannot run {nvcc} --version: {exc}") from exc
    if proc.returncode != 0:
        raise ToolError(f"{nvcc} --version exited {proc.returncode}", hint=proc.stderr.strip()[:200] or None)
    return parse_nvcc_release(proc.stdout)


def _toolkit_at(prefix: Path, spec: ToolkitSpec) -> Toolkit:
    home = (prefix / "cuda").resolve()
    nvcc = home / "bin" / "nvcc"
    cuobjdump = home / "bin" / "cuobjdump"
    for tool in (nvcc, cuobjdump):
        if not os.access(tool, os.X_OK):
            raise ToolError(f"the assembled toolkit has no runnable {tool}", where=str(prefix),
                            hint="remove the prefix and run `farm toolkit` again")
    return Toolkit(home, nvcc, cuobjdump, spec.nvcc_version, spec.cuda)


def ensure_toolkit(
    cuda: str,
    prefix: Path,
    *,
    extra: Sequence[str] = (),
    python: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Toolkit:
    """Return CUDA line ``cuda``'s toolkit under ``prefix``, assembling it from PyPI if needed.

    Cached: a prefix stamped with the same pins returns without running anything. ``prefix`` must
    be empty, missing, or a toolkit this function made; anything else is refused untouched.
    """
    from filelock import FileLock

    if os.name == "nt":
        raise ToolError("assembling a toolkit from PyPI is implemented for Linux hosts only",
                        hint="install the CUDA toolkit on this host and pass its CUDA_HOME (farm build --cuda-home)")
    spec = spec_for(cuda)
    key = spec.key(extra)
    prefix = Path(prefix).absolute()
    if prefix.exists() and not prefix.is_dir():
        raise UsageError(f"--prefix {prefix} is a file, not a folder", hint="choose an empty or new --prefix")
    stamp = _read_stamp(prefix)
    if stamp is not None and stamp.get("key") == key:
        return _toolkit_at(prefix, spec)

    prefix.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(prefix) + ".lock"):
        stamp = _read_stamp(prefix)  # another process may have finished meanwhile
        if stamp is not None and stamp.get("key") == key:
            return _toolkit_at(prefix, spec)
        if prefix.exists() and stamp is None and any(prefix.iterdir()):
            raise UsageError(
                f"{prefix} exists and is not a toolkit farm assembled; refusing to write into it",
                hint="choose an empty or new --prefix",
            )
        say = progress or (lambda _msg: None)
        say(f"assembling CUDA {cuda} from PyPI into {prefix}: {', '.join((*spec.requirements, *extra))}")
        staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}.", dir=prefix.parent))
        try:
            script = install_script(cuda, str(staging), python=python or sys.executable, extra=extra)
            proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise ToolError(
                    f"installing CUDA {cuda}'s wheels failed (rc {proc.returncode}):\n"
                    + (proc.stderr or proc.stdout).strip()[-3000:],
                    hint="check that pip can reach PyPI (proxy, certificates) and that the pins exist",
                )
            # The symlinks are relative, so the staged tree is valid at its final place.
            if prefix.exists():
                old = prefix.with_name(f".{prefix.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                prefix.rename(old)
                staging.rename(prefix)
                shutil.rmtree(old, ignore_errors=True)
            else:
                staging.rename(prefix)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        toolkit = _toolkit_at(prefix, spec)
        release = nvcc_release(toolkit.nvcc)
        if release != spec.nvcc_version:
            raise ToolError(f"{toolkit.nvcc} reports {release}, expected {spec.nvcc_version}", where=str(prefix))
        say(f"CUDA {cuda} toolkit ready: CUDA_HOME={toolkit.cuda_home}")
        return toolkit


def toolkit_at_home(cuda_home: Path) -> Toolkit:
    """A toolkit installed by other means (an image's, a system one): checked, not assembled."""
    home = Path(cuda_home).absolute()
    exe = ".exe" if os.name == "nt" else ""
    nvcc = home / "bin" / f"nvcc{exe}"
    cuobjdump = home / "bin" / f"cuobjdump{exe}"
    if not nvcc.exists():
        raise ToolError(f"{home} has no bin/nvcc{exe}", hint="point CUDA_HOME at a CUDA toolkit")
    if not cuobjdump.exists():
        raise ToolError(f"{home} has no bin/cuobjdump{exe}", hint="install the toolkit's cuobjdump component")
    release = nvcc_release(nvcc)
    return Toolkit(home, nvcc, cuobjdump, release, ".".join(release.split(".")[:2]))
