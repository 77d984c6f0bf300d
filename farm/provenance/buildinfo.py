"""``_build_info.json``: the provenance a wheel carries in its ``.dist-info/``.

The file is plain JSON (``docs/architecture.md`` shows it; the schema is
``farm/schemas/build_info.schema.json``); in farm it is one frozen :class:`BuildInfo`, read once
by :meth:`BuildInfo.from_json` (schema-validated; a foreign or newer file fails closed) and
written by :meth:`BuildInfo.to_json` (the exact bytes earlier farms wrote). This module builds it
from explicit values and fills the parts that come from the environment (CI run, toolchain
versions) from real sources. A ledger line (:class:`LedgerEntry`) is the same object plus
``filename``, ``sha256``, ``size`` and ``published``, made by :meth:`BuildInfo.ledger_entry`.
"""

from __future__ import annotations

import enum
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal, TypeVar

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from farm.errors import FarmError, LedgerError, ToolError, WheelError
from farm.fsutil import sha256_file as sha256_file  # re-exported: the hash every provenance records
from farm.model import label

# Reading a ledger imports this module: the toolkit (and the config and YAML behind it),
# importlib.metadata and importlib.resources are imported where they are used, not here.

SCHEMA_VERSION = 1
BUILD_INFO_NAME = "_build_info.json"
ASSERTED: Final = "asserted"
INFERRED: Final = "inferred"

#: Keys a ledger line adds to the ``_build_info.json`` object.
LEDGER_KEYS = ("filename", "sha256", "size", "published")
_T = TypeVar("_T")


# -- the typed object -------------------------------------------------------------------------
# Parsed once (schema-validated) into frozen objects and carried; written back by one to_json.
# Each class lists its fields in the file's key order, so to_json gives back the very bytes
# postbuild wrote. A key that older files may lack (a local run's url, torch_cuda, a toolkit's
# manifest) is ABSENT when the file lacks it, which is not the same as a recorded null.
class Absent(enum.Enum):
    """A key the file does not have (as opposed to one it records as ``null``)."""

    ABSENT = "absent"


ABSENT: Final = Absent.ABSENT
JSON = dict[str, object]


def _frozen(pairs: Mapping[str, _T]) -> Mapping[str, _T]:
    """A read-only copy that keeps the file's order."""
    return MappingProxyType(dict(pairs))


def _put(out: JSON, key: str, value: object) -> None:
    if value is not ABSENT:
        out[key] = value


def _only(data: Mapping[str, object], allowed: tuple[str, ...], what: str) -> None:
    """Fail closed on a key this farm does not know: it would be lost on writing back."""
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise _Unknown(f"{what} has key(s) {', '.join(map(repr, unknown))} this farm does not know")


class _Unknown(Exception):
    """Raised inside parsing; :meth:`BuildInfo.from_json` turns it into the caller's error."""


@dataclass(frozen=True)
class CellInfo:
    """The cell a wheel was built for (``None``: unknown, only in inferred provenance)."""

    cuda: str | None
    torch: str | None
    python: str | None
    platform: str | None

    @classmethod
    def from_mapping(cls, data: Mapping[str, str | None]) -> CellInfo:
        return cls(data["cuda"], data["torch"], data["python"], data["platform"])

    def to_dict(self) -> JSON:
        return {"cuda": self.cuda, "torch": self.torch, "python": self.python, "platform": self.platform}


@dataclass(frozen=True)
class ArchRequest:
    """The arch list as the configuration wrote it, and as farm normalised it."""

    requested: str | None
    normalised: str | None

    def to_dict(self) -> JSON:
        return {"requested": self.requested, "normalised": self.normalised}


@dataclass(frozen=True)
class Assertion:
    """The post-build assertion: its result and the readers that ran (their versions)."""

    result: Literal["passed", "failed"]
    native_reader: str | None
    cuobjdump: str | None

    def to_dict(self) -> JSON:
        return {"result": self.result, "native_reader": self.native_reader, "cuobjdump": self.cuobjdump}


@dataclass(frozen=True)
class Run:
    """The CI run that built the wheel (``provider`` ``local`` off CI)."""

    provider: str
    repository: str | None = None
    commit: str | None = None
    run_id: str | None = None
    attempt: str | None = None
    url: str | Absent | None = ABSENT

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Run:
        _only(data, _RUN_KEYS, "run")
        return cls(data["provider"], data["repository"], data["commit"], data["run_id"], data["attempt"],
                   data.get("url", ABSENT))

    def to_dict(self) -> JSON:
        out: JSON = {"provider": self.provider, "repository": self.repository, "commit": self.commit,
                     "run_id": self.run_id, "attempt": self.attempt}
        _put(out, "url", self.url)
        return out


_RUN_KEYS = ("provider", "repository", "commit", "run_id", "attempt", "url")


@dataclass(frozen=True)
class GitSource:
    repo: str
    ref: str | None
    commit: str | None
    kind: ClassVar[str] = "git"

    def to_dict(self) -> JSON:
        return {"kind": self.kind, "repo": self.repo, "ref": self.ref, "commit": self.commit}


@dataclass(frozen=True)
class SdistSource:
    name: str
    version: str | None
    sha256: str | None
    kind: ClassVar[str] = "sdist"

    def to_dict(self) -> JSON:
        return {"kind": self.kind, "name": self.name, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True)
class PathSource:
    path: str
    tree_sha256: str | None
    kind: ClassVar[str] = "path"

    def to_dict(self) -> JSON:
        return {"kind": self.kind, "path": self.path, "tree_sha256": self.tree_sha256}


Source = GitSource | SdistSource | PathSource


def source_from(data: Mapping[str, Any] | None) -> Source | None:
    """A source description (a fetched tree's, or the file's ``source``) as its typed object."""
    if data is None:
        return None
    if data["kind"] == "git":
        return GitSource(data["repo"], data["ref"], data["commit"])
    if data["kind"] == "sdist":
        return SdistSource(data["name"], data["version"], data["sha256"])
    return PathSource(data["path"], data["tree_sha256"])


@dataclass(frozen=True)
class ToolkitComponent:
    """One component of the toolkit (``cuda_nvcc``), with its archive's sha256."""

    name: str
    version: str
    sha256: str | None

    def to_dict(self) -> JSON:
        return {"name": self.name, "version": self.version, "sha256": self.sha256}


@dataclass(frozen=True)
class ToolkitRecord:
    """Which exact CUDA toolkit built the wheel."""

    source: Literal["redist", "pypi", "installed"]
    release: str | None
    manifest_url: str | Absent | None = ABSENT
    manifest_sha256: str | Absent | None = ABSENT
    components: tuple[ToolkitComponent, ...] = ()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ToolkitRecord:
        _only(data, ("source", "release", "manifest_url", "manifest_sha256", "components"), "toolchain.toolkit")
        return cls(data["source"], data["release"], data.get("manifest_url", ABSENT),
                   data.get("manifest_sha256", ABSENT),
                   tuple(ToolkitComponent(c["name"], c["version"], c["sha256"]) for c in data["components"]))

    def to_dict(self) -> JSON:
        out: JSON = {"source": self.source, "release": self.release}
        _put(out, "manifest_url", self.manifest_url)
        _put(out, "manifest_sha256", self.manifest_sha256)
        out["components"] = [c.to_dict() for c in self.components]
        return out


@dataclass(frozen=True)
class Toolchain:
    """Versions of the tools that made the wheel (``None``: unknown, never guessed)."""

    nvcc: str | None
    torch: str | None
    python: str | None
    builder: str | None
    cibuildwheel: str | None
    torch_cuda: str | Absent | None = ABSENT  # the CUDA line torch was built with
    toolkit: ToolkitRecord | Absent | None = ABSENT

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Toolchain:
        _only(data, ("nvcc", "torch", "torch_cuda", "python", "builder", "cibuildwheel", "toolkit"), "toolchain")
        toolkit = data.get("toolkit", ABSENT)
        return cls(data["nvcc"], data["torch"], data["python"], data["builder"], data["cibuildwheel"],
                   data.get("torch_cuda", ABSENT),
                   ToolkitRecord.from_mapping(toolkit) if isinstance(toolkit, Mapping) else toolkit)

    def to_dict(self) -> JSON:
        out: JSON = {"nvcc": self.nvcc, "torch": self.torch}
        _put(out, "torch_cuda", self.torch_cuda)
        out.update(python=self.python, builder=self.builder, cibuildwheel=self.cibuildwheel)
        toolkit = self.toolkit
        _put(out, "toolkit", toolkit.to_dict() if isinstance(toolkit, ToolkitRecord) else toolkit)
        return out


@dataclass(frozen=True)
class Bundled:
    """A bundled library (``*.libs/``): the targets found in it and the recipe's expectation
    (its own list, ``""`` for host-only, or ``None`` with the exemption's reason)."""

    found: str
    expected: str | None
    exempt: str | None

    def to_dict(self) -> JSON:
        return {"found": self.found, "expected": self.expected, "exempt": self.exempt}


_TOP_KEYS = ("schema_version", "package", "dist", "version", "cell", "build_epoch", "arch_list", "expected",
             "found", "assertion", "defaults_sha256", "recipe_sha256", "run", "source", "toolchain",
             "extensions", "provenance", "vendored")


@dataclass(frozen=True)
class BuildInfo:
    """One wheel's ``_build_info.json``, parsed and validated.

    ``expected`` / ``found``: archive path of each extension -> canonical arch list;
    ``extensions``: archive path -> sha256. ``None`` where an inferred provenance cannot say."""

    package: str | None
    dist: str
    version: str  # public, without the local label
    cell: CellInfo
    build_epoch: int | None
    arch_list: ArchRequest
    expected: Mapping[str, str] | None
    found: Mapping[str, str] | None
    assertion: Assertion | None
    defaults_sha256: str | None
    recipe_sha256: str | None
    run: Run | None
    source: Source | None
    toolchain: Toolchain | None
    extensions: Mapping[str, str] | None
    provenance: Literal["asserted", "inferred"]
    vendored: Mapping[str, Bundled] | Absent | None = ABSENT
    schema_version: int = SCHEMA_VERSION

    # -- reading --
    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], *, where: str | None = None,
                  error: type[FarmError] = WheelError) -> BuildInfo:
        """Parse and validate ``_build_info.json`` (its bytes, or the object already parsed).

        Raises ``error`` (:class:`WheelError` unless told) naming ``where`` and the first thing
        wrong: not JSON, a newer schema, a schema violation, a key this farm does not know."""
        obj = _load(data, where=where, error=error)
        if any(k in obj for k in LEDGER_KEYS):
            raise error(f"a ledger entry (it has {', '.join(k for k in LEDGER_KEYS if k in obj)}), not a "
                        f"{BUILD_INFO_NAME}", where=where,
                        hint="a wheel's provenance never holds the ledger's keys: the file was not written by "
                             "farm postbuild; rebuild the wheel with farm")
        return cls._from_valid(obj, where=where, error=error)

    @classmethod
    def _from_valid(cls, obj: Mapping[str, Any], *, where: str | None, error: type[FarmError]) -> BuildInfo:
        try:
            _only(obj, _TOP_KEYS + LEDGER_KEYS, BUILD_INFO_NAME)
            vendored = obj.get("vendored", ABSENT)
            return cls(
                package=obj["package"], dist=obj["dist"], version=obj["version"],
                cell=CellInfo.from_mapping(obj["cell"]), build_epoch=obj["build_epoch"],
                arch_list=ArchRequest(obj["arch_list"]["requested"], obj["arch_list"]["normalised"]),
                expected=_frozen(obj["expected"]) if obj["expected"] is not None else None,
                found=_frozen(obj["found"]) if obj["found"] is not None else None,
                assertion=_assertion(obj["assertion"]),
                defaults_sha256=obj["defaults_sha256"], recipe_sha256=obj["recipe_sha256"],
                run=Run.from_mapping(obj["run"]) if obj["run"] is not None else None,
                source=source_from(obj["source"]),
                toolchain=Toolchain.from_mapping(obj["toolchain"]) if obj["toolchain"] is not None else None,
                extensions=_frozen(obj["extensions"]) if obj["extensions"] is not None else None,
                provenance=obj["provenance"],
                vendored=_frozen({p: Bundled(v["found"], v["expected"], v["exempt"]) for p, v in vendored.items()})
                if isinstance(vendored, Mapping) else vendored,
                schema_version=obj["schema_version"],
            )
        except _Unknown as exc:
            raise error(f"invalid build info: {exc}", where=where,
                        hint="it was written by another tool or a newer farm: upgrade farm, or rebuild the "
                             "wheel with this one") from None

    # -- writing --
    def to_dict(self) -> JSON:
        """The JSON object, keys in the file's order."""
        out: JSON = {
            "schema_version": self.schema_version,
            "package": self.package,
            "dist": self.dist,
            "version": self.version,
            "cell": self.cell.to_dict(),
            "build_epoch": self.build_epoch,
            "arch_list": self.arch_list.to_dict(),
            "expected": dict(self.expected) if self.expected is not None else None,
            "found": dict(self.found) if self.found is not None else None,
            "assertion": self.assertion.to_dict() if self.assertion is not None else None,
            "defaults_sha256": self.defaults_sha256,
            "recipe_sha256": self.recipe_sha256,
            "run": self.run.to_dict() if self.run is not None else None,
            "source": self.source.to_dict() if self.source is not None else None,
            "toolchain": self.toolchain.to_dict() if self.toolchain is not None else None,
            "extensions": dict(self.extensions) if self.extensions is not None else None,
            "provenance": self.provenance,
        }
        vendored = self.vendored
        _put(out, "vendored", {p: v.to_dict() for p, v in vendored.items()} if isinstance(vendored, Mapping)
             else vendored)
        return out

    def to_json(self) -> bytes:
        """The bytes stored in the wheel: the file's key order, indented, one trailing newline."""
        return (json.dumps(self.to_dict(), indent=2) + "\n").encode()

    def ledger_entry(self, *, filename: str, sha256: str, size: int,
                     published: tuple[Published, ...] = ()) -> LedgerEntry:
        """The ledger line of the wheel this provenance describes (the one place entries are made)."""
        return LedgerEntry(self, filename, sha256, size, published)

    # -- what readers ask --
    @property
    def asserted(self) -> bool:
        """Asserted at build time and the assertion passed: the only provenance published."""
        return self.provenance == ASSERTED and self.assertion is not None and self.assertion.result == "passed"

    @property
    def bundled(self) -> Mapping[str, Bundled]:
        """The bundled libraries recorded (empty when none, or not recorded)."""
        return self.vendored if isinstance(self.vendored, Mapping) else {}


def _assertion(data: Mapping[str, Any] | None) -> Assertion | None:
    if data is None:
        return None
    _only(data, ("result", "native_reader", "cuobjdump"), "assertion")
    return Assertion(data["result"], data["native_reader"], data["cuobjdump"])


@dataclass(frozen=True)
class Published:
    """Where a wheel was published: the target's name and the file's URL there."""

    target: str
    url: str

    def to_dict(self) -> JSON:
        return {"target": self.target, "url": self.url}


@dataclass(frozen=True)
class LedgerEntry:
    """One ``ledger.jsonl`` line: a wheel's provenance plus its file name, bytes and publications."""

    info: BuildInfo
    filename: str
    sha256: str
    size: int
    published: tuple[Published, ...] = ()

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any], *, where: str | None = None,
                  error: type[FarmError] = LedgerError) -> LedgerEntry:
        """Parse and validate a ledger line (or fragment); raises ``error`` (:class:`LedgerError`)."""
        obj = _load(data, where=where, error=error)
        missing = [k for k in LEDGER_KEYS if k not in obj]
        if missing:
            raise error(f"not a ledger entry: no {', '.join(missing)}", where=where,
                        hint="a ledger entry is a _build_info.json plus filename, sha256, size and published")
        info = BuildInfo._from_valid(obj, where=where, error=error)
        try:
            for item in obj["published"]:
                _only(item, ("target", "url"), "published item")
        except _Unknown as exc:
            raise error(f"invalid ledger entry: {exc}", where=where,
                        hint="it was written by another tool or a newer farm: upgrade farm") from None
        return cls(info, obj["filename"], obj["sha256"], obj["size"],
                   tuple(Published(p["target"], p["url"]) for p in obj["published"]))

    def to_dict(self) -> JSON:
        return {**self.info.to_dict(), "filename": self.filename, "sha256": self.sha256, "size": self.size,
                "published": [p.to_dict() for p in self.published]}

    def with_published(self, target: str, url: str) -> LedgerEntry:
        return replace(self, published=(*self.published, Published(target, url)))


def _load(data: bytes | str | Mapping[str, Any], *, where: str | None, error: type[FarmError]) -> Mapping[str, Any]:
    """Parse (when bytes) and schema-check; a newer schema is named as such."""
    if isinstance(data, (bytes, str)):
        if len(data) > MAX_BUILD_INFO:
            raise error(f"{BUILD_INFO_NAME} is {len(data):,} bytes (at most {MAX_BUILD_INFO:,})", where=where,
                        hint="a real provenance is a few KiB: the file is malformed or hostile")
        try:
            obj: object = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise error(f"{BUILD_INFO_NAME} is not JSON: {exc}", where=where) from exc
    else:
        obj = data
    if isinstance(obj, Mapping):
        version = obj.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
            raise error(f"schema version {version}: this farm reads version {SCHEMA_VERSION}", where=where,
                        hint="it was written by a newer farm: upgrade farm to read it")
    validate(obj, where=where, error=error)
    assert isinstance(obj, Mapping)  # the schema's top level is an object
    return obj


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
    from farm.toolkit.assemble import nvcc_release

    return nvcc_release(nvcc)


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

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
    toolkit: ToolkitRecord | Mapping[str, Any] | None = None,
    torch_built: Mapping[str, Any] | None = None,
) -> Toolchain:
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
    torch_cuda = None
    if torch_built is not None and torch_minor not in (None, "none"):
        # the builder says which torch the build compiled against (the build environment's)
        torch, torch_cuda = torch_built.get("version"), torch_built.get("cuda")
    if isinstance(toolkit, Mapping):  # a Toolkit's record(): which exact toolkit, components and all
        toolkit = ToolkitRecord.from_mapping(toolkit)
    return Toolchain(
        nvcc=nvcc_version(Path(cuda_home)) if cuda_home else None,
        torch=torch,
        # a container build's Python is the container's: unknown (None) rather than this host's
        python=python if builder == "cibuildwheel" else python or platform.python_version(),
        builder=builder,
        cibuildwheel=_installed_version("cibuildwheel") if builder == "cibuildwheel" else None,
        torch_cuda=torch_cuda,  # the CUDA line that torch was built with ("13.0"), None: unknown
        toolkit=toolkit,
    )


# -- sources ----------------------------------------------------------------------------------
def git_source(repo: str, ref: str | None, commit: str | None) -> GitSource:
    return GitSource(repo, ref, commit)


def sdist_source(name: str, version: str | None, sha256: str | None) -> SdistSource:
    return SdistSource(name, version, sha256)


def path_source(path: str, tree_sha256: str | None) -> PathSource:
    return PathSource(path, tree_sha256)


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
    run: Run,
    source: Source | None,
    toolchain: Toolchain,
    extensions: Mapping[str, str],
    vendored: Mapping[str, Mapping[str, Any]] | None = None,
) -> BuildInfo:
    """An asserted provenance; every value is given, nothing is guessed.

    ``vendored``: each bundled library's found targets and expectation (recorded only when the
    wheel bundles any)."""
    return BuildInfo(
        package=package,
        dist=dist,
        version=version,
        cell=CellInfo.from_mapping(cell),
        build_epoch=int(build_epoch),
        arch_list=ArchRequest(requested, normalised),
        expected=_frozen(dict(sorted(expected.items()))),
        found=_frozen(dict(sorted(found.items()))),
        assertion=Assertion("passed", tools.get("native_reader"), tools.get("cuobjdump")),
        defaults_sha256=defaults_sha256,
        recipe_sha256=recipe_sha256,
        run=run,
        source=source,
        toolchain=toolchain,
        extensions=_frozen(dict(sorted(extensions.items()))),
        provenance=ASSERTED,
        vendored=_frozen({p: Bundled(v["found"], v["expected"], v["exempt"]) for p, v in sorted(vendored.items())})
        if vendored else ABSENT,
    )


def inferred_build_info(
    *,
    dist: str,
    version: str,
    cell: Mapping[str, str | None],
    found: Mapping[str, str],
    extensions: Mapping[str, str],
    package: str | None = None,
) -> BuildInfo:
    """What inspection alone can say about a wheel: the rest is ``null``, never guessed."""
    return BuildInfo(
        package=package, dist=dist, version=version,
        cell=CellInfo(cell.get("cuda"), cell.get("torch"), cell.get("python"), cell.get("platform")),
        build_epoch=None, arch_list=ArchRequest(None, None), expected=None,
        found=_frozen(dict(sorted(found.items()))), assertion=None, defaults_sha256=None,
        recipe_sha256=None, run=None, source=None, toolchain=None,
        extensions=_frozen(dict(sorted(extensions.items()))), provenance=INFERRED,
    )


# -- the file name a provenance implies (the upload gate and audit both check it) ---------------
def local_label(cell: CellInfo) -> str:
    """``cu128torch2.8``, or ``cu128`` for a package that does not link torch."""
    return label.local_label(cell.cuda or "", cell.torch or label.NO_TORCH)


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


def name_problems(filename: str, info: BuildInfo) -> list[str]:
    """Where the file name disagrees with the cell its provenance describes (empty: agrees)."""
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        return [f"not a valid wheel file name ({exc})"]
    cell = info.cell
    problems: list[str] = []
    if canonicalize_name(info.dist) != name:
        problems.append(f"project {name} but provenance says {info.dist!r}")
    if version.public != _public(info.version):  # both spelled as PEP 440 normalises them
        problems.append(f"version {version.public} but provenance says {info.version!r}")
    want = local_label(cell)
    if (version.local or "") != want:
        problems.append(f"local label {version.local or '(none)'} but the cell is {want}")
    epoch = info.build_epoch or 0
    have = build[0] if build else 0
    if have != epoch:
        problems.append(f"build tag {have or '(none)'} but build_epoch is {epoch}")
    python = cell.python
    if python == "abi3":
        if not any(t.abi == "abi3" for t in tags):
            problems.append("no abi3 tag but the cell is abi3")
    elif python and not any(t.interpreter == python for t in tags):
        problems.append(f"python tag {'.'.join(sorted({t.interpreter for t in tags}))} but the cell is {python}")
    plat = cell.platform
    if plat and not any(_platform_matches(plat, t.platform) for t in tags):
        problems.append(f"platform {'.'.join(sorted({t.platform for t in tags}))} but the cell is {plat}")
    return problems


# -- validation -------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    from importlib import resources

    text = resources.files("farm").joinpath("schemas/build_info.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return,unused-ignore]


@lru_cache(maxsize=1)
def _validator() -> Any:
    import jsonschema  # type: ignore[import-untyped]  # only validation pays for the import

    return jsonschema.Draft202012Validator(schema())  # made once: every read of a provenance checks


def validate(info: Any, *, where: str | None = None, error: type[FarmError] = WheelError) -> None:
    """Raise ``error`` naming the first schema violation of ``info``."""
    validator = _validator()
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


def read_embedded(wheel: Any, member: str, *, where: str) -> BuildInfo:
    """``member`` of an open :class:`~farm.binary.wheelfile.SafeWheel`, size-checked before it is
    read, parsed and validated."""
    size = wheel.zip.getinfo(member).file_size
    if size > MAX_BUILD_INFO:
        raise WheelError(f"{BUILD_INFO_NAME} is {size:,} bytes (at most {MAX_BUILD_INFO:,})", where=where,
                         hint="a real provenance is a few KiB: the wheel is malformed or hostile")
    return BuildInfo.from_json(wheel.read(member), where=where)
