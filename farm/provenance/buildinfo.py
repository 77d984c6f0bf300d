"""``_build_info.json``: the provenance a wheel carries in its ``.dist-info/``.

The object is plain JSON (``docs/architecture.md`` shows it; the schema is
``farm/schemas/build_info.schema.json``). This module builds it from explicit values, fills the
parts that come from the environment (CI run, toolchain versions) from real sources, and reads
and validates it back. A ledger entry is the same object plus ``filename``, ``sha256``, ``size``
and ``published``.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from farm.errors import FarmError, ToolError, WheelError
from farm.fsutil import sha256_file  # noqa: F401 - re-exported: the hash every provenance records
from farm.toolkit.assemble import nvcc_release

SCHEMA_VERSION = 1
BUILD_INFO_NAME = "_build_info.json"
ASSERTED = "asserted"
INFERRED = "inferred"

#: Keys a ledger line adds to the ``_build_info.json`` object.
LEDGER_KEYS = ("filename", "sha256", "size", "published")


# -- the CI run -------------------------------------------------------------------------------
def _local_run() -> dict[str, str | None]:
    return {"provider": "local", "repository": None, "commit": None, "run_id": None, "attempt": None}


def run_from_env(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The CI run that built the wheel, from the provider's own variables, or ``local``."""
    env = os.environ if env is None else env
    if env.get("GITHUB_ACTIONS") == "true":
        repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
        attempt = env.get("GITHUB_RUN_ATTEMPT")
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        url = f"{server}/{repo}/actions/runs/{run_id}" if repo and run_id else None
        if url and attempt:
            url += f"/attempts/{attempt}"
        return {"provider": "github", "repository": repo, "commit": env.get("GITHUB_SHA"),
                "run_id": run_id, "attempt": attempt, "url": url}
    if env.get("GITLAB_CI") == "true":
        return {"provider": "gitlab", "repository": env.get("CI_PROJECT_PATH"),
                "commit": env.get("CI_COMMIT_SHA"), "run_id": env.get("CI_PIPELINE_ID"),
                "attempt": None, "url": env.get("CI_JOB_URL")}
    if env.get("BUILDKITE") == "true":
        return {"provider": "buildkite", "repository": env.get("BUILDKITE_REPO"),
                "commit": env.get("BUILDKITE_COMMIT"), "run_id": env.get("BUILDKITE_BUILD_NUMBER"),
                "attempt": env.get("BUILDKITE_RETRY_COUNT"), "url": env.get("BUILDKITE_BUILD_URL")}
    if env.get("CI", "").lower() in ("true", "1"):
        # Some CI we do not know: say so rather than claim a local build.
        return {**_local_run(), "provider": "ci"}
    return _local_run()


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
    parts = version.split("+", 1)[0].split(".")
    return ".".join(parts[:2])


def toolchain(
    *,
    cuda_home: Path | None,
    builder: str | None,
    python: str | None = None,
    torch_minor: str | None = None,
    toolkit: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Versions of the tools that made the wheel.

    ``nvcc`` is asked (the one under ``cuda_home``). ``torch`` is the installed torch when its
    minor is ``torch_minor`` (the cell's), else unknown (``None``): a containerised build's torch
    is not this interpreter's. ``cibuildwheel`` is the installed one when it was the builder.
    ``python`` defaults to this interpreter (the native builder's); a containerised build passes
    its own (``None`` there means unknown, never this host's).
    """
    torch = installed_torch() if torch_minor not in (None, "none") else None
    if torch is not None and _minor(torch) != torch_minor:
        torch = None
    return {
        "nvcc": nvcc_version(Path(cuda_home)) if cuda_home else None,
        "torch": torch,
        # a container build's Python is the container's: unknown (None) rather than this host's
        "python": python if builder == "cibuildwheel" else python or platform.python_version(),
        "builder": builder,
        "cibuildwheel": _installed_version("cibuildwheel") if builder == "cibuildwheel" else None,
        # which exact toolkit: source, release, manifest, components with their sha256
        "toolkit": dict(toolkit) if toolkit is not None else None,
    }


# -- sources ----------------------------------------------------------------------------------
def git_source(repo: str, ref: str | None, commit: str | None) -> dict[str, Any]:
    return {"kind": "git", "repo": repo, "ref": ref, "commit": commit}


def sdist_source(name: str, version: str | None, sha256: str | None) -> dict[str, Any]:
    return {"kind": "sdist", "name": name, "version": version, "sha256": sha256}


def path_source(path: str, tree_sha256: str | None) -> dict[str, Any]:
    return {"kind": "path", "path": path, "tree_sha256": tree_sha256}


# -- the object -------------------------------------------------------------------------------
def make_build_info(
    *,
    package: str,
    dist: str,
    version: str,
    cell: Mapping[str, str],
    build_epoch: int,
    requested: str,
    normalised: str,
    expected: Mapping[str, str],
    found: Mapping[str, str],
    tools: Mapping[str, str | None],
    defaults_sha256: str | None,
    recipe_sha256: str | None,
    run: Mapping[str, Any],
    source: Mapping[str, Any] | None,
    toolchain: Mapping[str, Any],
    extensions: Mapping[str, str],
    vendored: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """An asserted ``_build_info.json`` object; every value is given, nothing is guessed.

    ``vendored``: each bundled library's found targets and expectation (recorded only when the
    wheel bundles any)."""
    info: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "package": package,
        "dist": dist,
        "version": version,
        "cell": {k: cell[k] for k in ("cuda", "torch", "python", "platform")},
        "build_epoch": int(build_epoch),
        "arch_list": {"requested": requested, "normalised": normalised},
        "expected": dict(sorted(expected.items())),
        "found": dict(sorted(found.items())),
        "assertion": {
            "result": "passed",
            "native_reader": tools.get("native_reader"),
            "cuobjdump": tools.get("cuobjdump"),
        },
        "defaults_sha256": defaults_sha256,
        "recipe_sha256": recipe_sha256,
        "run": dict(run),
        "source": dict(source) if source is not None else None,
        "toolchain": dict(toolchain),
        "extensions": dict(sorted(extensions.items())),
        "provenance": ASSERTED,
    }
    if vendored:
        info["vendored"] = {path: dict(v) for path, v in sorted(vendored.items())}
    return info


def inferred_build_info(
    *,
    dist: str,
    version: str,
    cell: Mapping[str, str | None],
    found: Mapping[str, str],
    extensions: Mapping[str, str],
    package: str | None = None,
) -> dict[str, Any]:
    """What inspection alone can say about a wheel: the rest is ``null``, never guessed."""
    return {
        "schema_version": SCHEMA_VERSION,
        "package": package,
        "dist": dist,
        "version": version,
        "cell": {k: cell.get(k) for k in ("cuda", "torch", "python", "platform")},
        "build_epoch": None,
        "arch_list": {"requested": None, "normalised": None},
        "expected": None,
        "found": dict(sorted(found.items())),
        "assertion": None,
        "defaults_sha256": None,
        "recipe_sha256": None,
        "run": None,
        "source": None,
        "toolchain": None,
        "extensions": dict(sorted(extensions.items())),
        "provenance": INFERRED,
    }


# -- the file name a provenance implies (the upload gate and audit both check it) ---------------
def local_label(cell: Mapping[str, Any]) -> str:
    """``cu128torch2.8``, or ``cu128`` for a package that does not link torch."""
    cuda = f"cu{str(cell.get('cuda', '')).replace('.', '')}"
    torch = cell.get("torch")
    return cuda if torch in (None, "none") else f"{cuda}torch{torch}"


def _platform_matches(cell_platform: str, wheel_platform: str) -> bool:
    if wheel_platform == cell_platform:
        return True
    # linux_x86_64 is published as manylinux_2_28_x86_64 / musllinux_1_2_x86_64 after repair.
    if cell_platform.startswith("linux_"):
        arch = cell_platform[len("linux_"):]
        return wheel_platform.endswith("_" + arch) and wheel_platform.startswith(("manylinux", "musllinux"))
    return False


def _public(version: Any) -> str | None:
    try:
        return Version(str(version)).public
    except InvalidVersion:
        return None


def name_problems(filename: str, info: Mapping[str, Any]) -> list[str]:
    """Where the file name disagrees with the cell its provenance describes (empty: agrees)."""
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        return [f"not a valid wheel file name ({exc})"]
    cell = info.get("cell") or {}
    problems: list[str] = []
    dist = info.get("dist") or ""
    if canonicalize_name(dist) != name:
        problems.append(f"project {name} but provenance says {dist!r}")
    if version.public != _public(info.get("version")):  # both spelled as PEP 440 normalises them
        problems.append(f"version {version.public} but provenance says {info.get('version')!r}")
    want = local_label(cell)
    if (version.local or "") != want:
        problems.append(f"local label {version.local or '(none)'} but the cell is {want}")
    epoch = info.get("build_epoch") or 0
    have = build[0] if build else 0
    if have != epoch:
        problems.append(f"build tag {have or '(none)'} but build_epoch is {epoch}")
    python = cell.get("python")
    if python == "abi3":
        if not any(t.abi == "abi3" for t in tags):
            problems.append("no abi3 tag but the cell is abi3")
    elif python and not any(t.interpreter == python for t in tags):
        problems.append(f"python tag {'.'.join(sorted({t.interpreter for t in tags}))} but the cell is {python}")
    plat = cell.get("platform")
    if plat and not any(_platform_matches(plat, t.platform) for t in tags):
        problems.append(f"platform {'.'.join(sorted({t.platform for t in tags}))} but the cell is {plat}")
    return problems



def dumps(info: Mapping[str, Any]) -> bytes:
    """The bytes stored in the wheel: stable key order, one trailing newline."""
    return (json.dumps(info, indent=2, sort_keys=False) + "\n").encode()


# -- validation -------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    text = resources.files("farm").joinpath("schemas/build_info.schema.json").read_text()
    return json.loads(text)


def validate(info: Any, *, where: str | None = None, error: type[FarmError] = WheelError) -> None:
    """Raise ``error`` naming the first schema violation of ``info``."""
    import jsonschema  # type: ignore[import-untyped]  # only validation pays for the import

    validator = jsonschema.Draft202012Validator(schema())
    problems = sorted(validator.iter_errors(info), key=lambda e: list(e.absolute_path))
    if problems:
        first = problems[0]
        at = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise error(
            f"invalid build info at {at}: {first.message}{more}",
            where=where,
            hint="the provenance must follow farm/schemas/build_info.schema.json",
        )


# A real _build_info.json is a few KiB; a hostile one must not cost gigabytes to parse.
MAX_BUILD_INFO = 4 << 20


def read_embedded(wheel: Any, member: str, *, where: str) -> dict[str, Any]:
    """``member`` of an open :class:`~farm.binary.wheelfile.SafeWheel`, size-checked before it is
    read, parsed and validated."""
    size = wheel.zip.getinfo(member).file_size
    if size > MAX_BUILD_INFO:
        raise WheelError(f"{BUILD_INFO_NAME} is {size:,} bytes (at most {MAX_BUILD_INFO:,})", where=where,
                         hint="a real provenance is a few KiB: the wheel is malformed or hostile")
    return loads(wheel.read(member), where=where)


def loads(data: bytes, *, where: str | None = None) -> dict[str, Any]:
    """Parse and validate stored ``_build_info.json`` bytes."""
    try:
        info = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WheelError(f"{BUILD_INFO_NAME} is not JSON: {exc}", where=where) from exc
    validate(info, where=where)
    return info
