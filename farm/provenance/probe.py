"""The parts of a provenance that come from the environment: the CI run and the toolchain's
versions, each read from its real source (the provider's variables, ``nvcc``, installed metadata).

The record types they fill are :mod:`farm.provenance.buildinfo`'s."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from farm.errors import ToolError
from farm.provenance.buildinfo import CompileCacheRecord, FarmDepRecord, Run, Toolchain, ToolkitRecord
from farm.provenance.shape import ABSENT, Absent
from farm.toolkit.assemble import nvcc_release


# -- the CI run -------------------------------------------------------------------------------
def run_from_env(env: Mapping[str, str] | None = None) -> Run:
    """The CI run that built the wheel, from the provider's own variables, or ``local``."""
    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") == "true":
        repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
        attempt = env.get("GITHUB_RUN_ATTEMPT")
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        url = f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else None
        if url and attempt:
            url += f"/attempts/{attempt}"
        return Run("github", repo, env.get("GITHUB_SHA"), run_id, attempt, url)
    if env.get("GITLAB_CI") == "true":
        return Run("gitlab", env.get("CI_PROJECT_PATH"), env.get("CI_COMMIT_SHA"), env.get("CI_PIPELINE_ID"),
                   None, env.get("CI_JOB_URL"))
    if env.get("BUILDKITE") == "true":
        return Run("buildkite", env.get("BUILDKITE_REPO"), env.get("BUILDKITE_COMMIT"),
                   env.get("BUILDKITE_BUILD_NUMBER"), env.get("BUILDKITE_RETRY_COUNT"),
                   env.get("BUILDKITE_BUILD_URL"))
    if env.get("CI", "").lower() in ("true", "1"):
        # Some CI we do not know: say so rather than claim a local build.
        return Run("ci")
    return Run("local")


# -- the toolchain ----------------------------------------------------------------------------
@lru_cache(maxsize=8)
def nvcc_version(cuda_home: Path) -> str:
    """The version the ``nvcc`` of ``cuda_home`` reports (the toolkit the build used)."""
    nvcc = Path(cuda_home) / "bin" / ("nvcc.exe" if os.name == "nt" else "nvcc")
    if not nvcc.exists():
        raise ToolError(f"no nvcc at {nvcc}", hint="set CUDA_HOME to the toolkit the wheel was built with")
    return nvcc_release(nvcc)


def _installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def installed_torch() -> str | None:
    """The torch installed beside farm (read from its metadata: importing torch takes seconds)."""
    return _installed_version("torch")


def _minor(version: str) -> str:
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def toolchain(
    *,
    cuda_home: Path | None,
    builder: str | None,
    python: str | None = None,
    torch_minor: str | None = None,
    toolkit: ToolkitRecord | Mapping[str, Any] | None = None,
    torch_built: Mapping[str, Any] | None = None,
    compile_cache: CompileCacheRecord | Mapping[str, Any] | Absent | None = ABSENT,
    farm_deps: Sequence[Mapping[str, str]] = (),
    image: str | Absent | None = ABSENT,
) -> Toolchain:
    """Versions of the tools that made the wheel.

    ``nvcc`` is asked (the one under ``cuda_home``). ``torch`` is the installed torch when its
    minor is ``torch_minor`` (the cell's), else unknown (``None``): a containerised build's torch
    is not this interpreter's. ``cibuildwheel`` is the installed one when it was the builder.
    ``python`` defaults to this interpreter (the native builder's); a containerised build passes
    its own (``None`` there means unknown, never this host's). ``compile_cache``: the compiler
    cache's counts when the build counted them (left out of the file when not given).
    ``farm_deps``: the farm wheels the build environment held to build against (left out when none).
    ``image``: a cibuildwheel build's container image (None: cibuildwheel's own; left out otherwise).
    """
    torch = installed_torch() if torch_minor not in (None, "none") else None
    if torch is not None and _minor(torch) != torch_minor:
        torch = None
    torch_cuda = None
    if torch_built is not None and torch_minor not in (None, "none"):
        # the builder says which torch the build compiled against (the build environment's)
        torch, torch_cuda = torch_built.get("version"), torch_built.get("cuda")
    if isinstance(toolkit, Mapping):  # a Toolkit's record(): which exact toolkit, components and all
        toolkit = ToolkitRecord.from_mapping(toolkit)
    if isinstance(compile_cache, Mapping):
        compile_cache = CompileCacheRecord.from_mapping(compile_cache)
    return Toolchain(
        nvcc=nvcc_version(Path(cuda_home)) if cuda_home else None,
        torch=torch,
        # a container build's Python is the container's: unknown (None) rather than this host's
        python=python if builder == "cibuildwheel" else python or platform.python_version(),
        builder=builder,
        cibuildwheel=_installed_version("cibuildwheel") if builder == "cibuildwheel" else None,
        torch_cuda=torch_cuda,  # the CUDA line that torch was built with ("13.0"), None: unknown
        toolkit=toolkit,
        compile_cache=compile_cache,
        farm_deps=tuple(FarmDepRecord.from_mapping(d) for d in farm_deps) if farm_deps else ABSENT,
        image=image if builder == "cibuildwheel" else ABSENT,
    )
