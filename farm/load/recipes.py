"""``packages/<name>.yml`` read into :class:`~farm.model.config.Recipe`, and a farm root's whole
configuration (:func:`load_config`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from farm.errors import ArchError, ConfigError, UsageError, clip, did_you_mean
from farm.load.defaults import load_defaults
from farm.load.sections import (
    CUDA_LINE,
    SHA256,
    TORCH_MINOR,
    Section,
    arch_spec,
    check_cuda_key,
    component_names,
    describe,
    load_build,
    validate_archs,
    version_str,
)
from farm.model.arch import ArchList, validate_for_cuda
from farm.model.config import (
    DEFAULTS_FILE,
    PACKAGES_DIR,
    PLACEHOLDER,
    PLACEHOLDER_REF,
    PLATFORM_GROUPS,
    PLATFORMS,
    SHARD_PLATFORMS,
    SPLIT_PLATFORMS,
    ArchiveOrigin,
    ArchRules,
    ArchSpec,
    BuildKnobs,
    ComboFilter,
    Defaults,
    ExtensionArchs,
    FarmConfig,
    GitSource,
    KernelFamily,
    LintIgnore,
    PathSource,
    Recipe,
    Restriction,
    SdistSource,
    Sharding,
    SiblingPin,
    Source,
    VendoredLib,
    VendorSource,
    VerifyKnobs,
    requirement_refs,
    url_problem,
)
from farm.model.yamlsrc import YList, YMap, load_yaml

if TYPE_CHECKING:
    from packaging.requirements import Requirement

FLOATING_REFS = frozenset({"main", "master", "head", "develop", "dev", "trunk", "latest", "nightly"})
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# archives source.vendor unpacks (farm.source.fetch.unpack reads them)
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tar", ".zip")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ------------------------------------------------------------------------------------------------
# packages/<name>.yml
# ------------------------------------------------------------------------------------------------
_RECIPE_KEYS = (
    "name", "dist", "version", "source", "links_torch", "jit", "build_epoch", "arch", "extensions",
    "lint_ignore", "kernel_families", "only", "min_torch", "build", "requires_dist", "verify", "vendored",
    "sharding",
)
# More compile jobs than this is a typo, not a plan: each one is a CI job of the 256-job matrix.
MAX_SHARD_JOBS = 64


def load_recipe(path: Path, defaults: Defaults, root: Path) -> Recipe:
    display = _display(path, root)
    data, raw = load_yaml(path, display=display)
    top = Section(data, display, "")
    name = top.get("name", str, required=True)
    if name != path.stem:
        raise ConfigError(f"name {name!r} does not match the file name {path.name!r}", where=top.where("name"),
                          hint=f"rename the file to {name}.yml or set name: {path.stem}")
    dist = top.get("dist", str, default=name.replace("-", "_"))
    if not _NAME.match(dist):
        raise ConfigError(f"dist {dist!r} is not a valid distribution name", where=top.where("dist"))
    src_sec = top.section("source", required=True)
    assert src_sec is not None
    source = _load_source(src_sec, root)
    vendor = _load_vendor(src_sec)
    version = top.get("version", str, fix="quote it: version: '1.2.3'",
                      default=source.version if isinstance(source, SdistSource) else None)
    if version is None:
        top.get("version", str, required=True, fix="add the package version, e.g. version: '2.8.3'")
    try:
        Version(version)
    except InvalidVersion:
        raise ConfigError(f"version {version!r} is not a PEP 440 version", where=top.where("version")) from None
    if "+" in version:
        raise ConfigError(f"version {version!r} already has a local label", where=top.where("version"),
                          hint="farm adds +cuXXXtorchM.m itself; write the public version")
    links_torch = top.get("links_torch", bool, required=True)
    jit = top.get("jit", bool, default=False)
    epoch = top.get("build_epoch", int, default=0)
    if epoch < 0:
        raise ConfigError("'build_epoch' must be >= 0", where=top.where("build_epoch"))

    arch, by_platform = _load_arch_rules(top, defaults)
    extensions = _load_extensions(top, defaults)
    vendored = _load_vendored(top)
    ignores = _load_ignores(top)
    families_kind, families = _load_families(top)
    only = _load_only(top, defaults)
    build_sec = top.section("build")
    build = load_build(build_sec) if build_sec else BuildKnobs()
    requires = top.words("requires_dist")
    # written into the wheel's METADATA: each must be a PEP 508 requirement
    required = _requirements(top, "requires_dist", requires, "write it like 'numpy>=1.24'")
    for req, parsed in zip(requires, required, strict=True):
        if links_torch and parsed.name.lower() == "torch":
            # the wheel runs only with the torch minor it was built against: farm writes that pin
            raise ConfigError(f"requires_dist entry {req!r}: farm pins torch itself (torch==<the cell's minor>.*) "
                              "for a package that links torch; a torch entry would loosen that pin",
                              where=top.where("requires_dist"), hint=f"remove {req!r} from requires_dist")
    if build_sec:  # a farm wheel of the same cell as a build dependency: {version:X}+{local:X}
        _requirements(build_sec, "extra_deps", build.extra_deps,
                      "write it like 'numpy>=1.24' or 'cumm=={version:cumm}+{local:cumm}'")
    sharding = _load_sharding(top)
    verify_sec = top.section("verify")
    verify = _load_verify(verify_sec) if verify_sec else VerifyKnobs()
    top.done(_RECIPE_KEYS)
    if not links_torch:
        combos = [spec for rules in (arch, *by_platform.values()) for spec in rules.by_combo.values()]
        if combos:
            raise ConfigError("per-(cuda, torch) arch overrides on a package with links_torch: false",
                              where=combos[0].where, hint="use arch.by_cuda: the package has no torch axis")
    return Recipe(
        name=name, dist=dist, version=version, source=source, links_torch=links_torch, jit=jit,
        build_epoch=epoch, arch=arch, arch_by_platform=by_platform, extensions=extensions,
        lint_ignore=ignores, only=only, build=build, requires_dist=requires, path=path,
        display=display, sha256=hashlib.sha256(raw).hexdigest(), verify=verify, vendored=vendored,
        sharding=sharding, kernel_families=families_kind, families=families, vendor=vendor,
    )


def _load_sharding(top: Section) -> Sharding | None:
    """``sharding: 20`` or ``sharding: {jobs: 10, platforms: [linux_x86_64, linux_aarch64]}``."""
    if "sharding" not in top.data:
        return None
    value = top.data["sharding"]
    if isinstance(value, YMap):
        sec = top.section("sharding")
        assert sec is not None
        jobs, platforms, where = sec.get("jobs", int, required=True), sec.str_list("platforms"), sec.where("jobs")
        for p in platforms or ():
            if p not in SHARD_PLATFORMS:
                raise ConfigError(f"sharding.platforms: farm shards Linux builds only, not {p!r}",
                                  where=sec.where("platforms"),
                                  hint=did_you_mean(p, SHARD_PLATFORMS) or f"one of {', '.join(SHARD_PLATFORMS)}")
        sec.done(("jobs", "platforms"))
    else:
        jobs = top.get("sharding", int, fix="write the number of compile jobs, e.g. sharding: 10")
        platforms, where = None, top.where("sharding")
    if not 2 <= jobs <= MAX_SHARD_JOBS:
        raise ConfigError(f"sharding: {jobs} compile jobs; it must be between 2 and {MAX_SHARD_JOBS}", where=where,
                          hint="remove the key for an ordinary (unsharded) build")
    return Sharding(jobs, tuple(platforms) if platforms else SHARD_PLATFORMS)


def _requirements(sec: Section, key: str, entries: tuple[str, ...], hint: str) -> list[Requirement]:
    """The entries of a requirement list (``requires_dist``, ``build.extra_deps``), parsed with
    their placeholders sampled. An entry that is no requirement is refused, and so is one that
    names an earlier entry's project (canonical name) under the same marker: pip would take
    both, and which specifier the recipe meant is for its author to say."""
    if not entries:  # most recipes have none: reading them all does not pay for the parser's import
        return []
    from packaging.requirements import InvalidRequirement, Requirement  # noqa: PLC0415
    from packaging.utils import canonicalize_name  # noqa: PLC0415

    value = sec.data.get(key)
    parsed: list[Requirement] = []
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for i, entry in enumerate(entries):
        where = f"{sec.file}:{value.line_of(i)}" if isinstance(value, YList) else sec.where(key)
        try:
            req = Requirement(_sample(entry, f"{sec.key_path(key)} entry", where))
        except InvalidRequirement as exc:
            raise ConfigError(f"{sec.key_path(key)} entry {entry!r} is not a requirement: {exc}",
                              where=where, hint=hint) from None
        ident = (canonicalize_name(req.name), str(req.marker or ""))
        if ident in seen:
            first, first_where = seen[ident]
            marker = f" under the same marker ({req.marker})" if req.marker else ""
            raise ConfigError(f"{sec.key_path(key)} entry {entry!r} repeats project {ident[0]!r} of entry "
                              f"{first!r} ({first_where}){marker}", where=where,
                              hint="keep one entry, with every version specifier it needs")
        seen[ident] = (entry, where)
        parsed.append(req)
    return parsed


def _sample(requirement: str, what: str, where: str) -> str:
    """The entry with its placeholders filled with sample values, to check it is a requirement."""
    def fill(match: re.Match[str]) -> str:
        ref = PLACEHOLDER_REF.match(match[1])
        if ref is None:
            raise ConfigError(f"{what} {requirement!r}: unknown placeholder {match[0]!r}", where=where,
                              hint="placeholders are {version:NAME} and {local:NAME}, NAME a recipe in packages/")
        return "0" if ref[1] == "version" else "cu128"
    return PLACEHOLDER.sub(fill, requirement)


def _load_verify(sec: Section) -> VerifyKnobs:
    device = sec.data.get("expect_device_error", False)
    sec.seen.add("expect_device_error")
    if not isinstance(device, (bool, str)) or device == "":
        raise ConfigError(f"{sec.key_path('expect_device_error')!r} must be true or the text the error contains, "
                          f"got {describe(device)}", where=sec.where("expect_device_error"))
    knobs = VerifyKnobs(
        import_name=sec.get("import_name", str),
        extra_imports=sec.words("extra_imports"),
        no_direct_import=sec.words("no_direct_import"),
        expect_device_error=device,
        needs_driver=sec.get("needs_driver", bool, default=False),
        runtime_libs=component_names(sec, "runtime_libs") or (),
    )
    for name in (knobs.import_name, *knobs.extra_imports):
        if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", name):
            raise ConfigError(f"verify: {name!r} is not a module name", where=sec.where(),
                              hint="a dotted Python module name, e.g. spconv.pytorch")
    sec.done(("import_name", "extra_imports", "no_direct_import", "expect_device_error", "needs_driver",
              "runtime_libs"))
    return knobs


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _one_kind(sec: Section, kinds: tuple[str, ...], allowed: tuple[str, ...], hint: str) -> str:
    """The one key of ``kinds`` that ``sec`` has (its ``allowed`` keys checked first when it has
    none or several)."""
    found = [k for k in kinds if k in sec.data]
    if len(found) != 1:
        sec.done(allowed)
        raise ConfigError(f"{sec.path} must have exactly one of {', '.join(map(repr, kinds))}"
                          + (f" (found {', '.join(found)})" if found else ""), where=sec.where(), hint=hint)
    return found[0]


def _sdist(sub: Section, fix: str) -> SdistSource:
    name = sub.get("name", str, required=True)
    version = sub.get("version", str, required=True, fix="quote it: version: '1.2.3'")
    sha = _pinned_sha256(sub, fix)
    sub.done(("name", "version", "sha256"))
    return SdistSource(name, version, sha)


def _load_source(sec: Section, root: Path) -> Source:
    kind = _one_kind(sec, ("git", "sdist", "path"), ("git", "sdist", "path", "vendor"),
                     "e.g. source: {git: {repo: owner/name, ref: v1.2.3}}")
    if kind == "path":
        rel = sec.get("path", str)
        sec.done(("path", "vendor"))
        target = (root / rel).resolve()
        if not target.is_dir():
            raise ConfigError(f"source.path {rel!r} is not a directory", where=sec.where("path"),
                              hint="give a folder relative to the repository root")
        return PathSource(target, rel)
    sub = sec.section(kind)
    sec.done((kind, "vendor"))
    assert sub is not None
    if kind == "git":
        repo = _git_repo(sub)
        ref = sub.get("ref", str, required=True, fix="pin a tag or a commit: ref: v1.2.3")
        if ref.lower() in FLOATING_REFS or ref.startswith("refs/heads/") or ref.lower().startswith("origin/"):
            raise ConfigError(
                f"source.git.ref {ref!r} is a floating ref: builds would change under the same version",
                where=sub.where("ref"), hint="pin a release tag or a full commit sha",
            )
        submodules = sub.get("submodules", bool, default=False)
        sub.done(("repo", "ref", "submodules"))
        return GitSource(repo, ref, submodules)
    return _sdist(sub, "add the sdist's sha256 (pip download, then sha256sum)")


def _git_repo(sub: Section) -> str:
    """A git section's ``repo``: a GitHub owner/name or a git URL (a local path included)."""
    repo = sub.get("repo", str, required=True)
    is_url = "://" in repo or repo.startswith(("git@", "/"))
    if not is_url and not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", repo):
        raise ConfigError(f"{sub.key_path('repo')} {clip(repo)!r} is neither a GitHub owner/name nor a git URL",
                          where=sub.where("repo"), hint="e.g. repo: Dao-AILab/flash-attention")
    return str(repo)


def _relative_path(sec: Section, key: str, what: str, example: str, *, required: bool = True) -> str | None:
    """A folder relative to a tree's root, as written (``a/b``): no absolute path, ``..``, ``.``
    part, backslash or ``.git``; None when absent and not required."""
    value = sec.get(key, str, required=required, fix=f"e.g. {key}: {example}")
    if value is None:
        return None
    parts = value.split("/")
    if (not value or value.startswith("/") or "\\" in value or ":" in parts[0]
            or any(part in ("", ".", "..", ".git") for part in parts)):
        raise ConfigError(f"{sec.key_path(key)} {clip(value)!r} is not a folder inside {what}",
                          where=sec.where(key),
                          hint=f"write a relative path with '/' and no '..', '.' or empty parts, e.g. {example}")
    return str(value)


def _load_vendor(src: Section) -> tuple[VendorSource, ...]:
    """``source.vendor``: trees placed into the source at a path, each from a pinned archive, sdist
    or git commit."""
    items = src.get("vendor", list, default=YList())
    out: list[VendorSource] = []
    for i, item in enumerate(items):
        sec = Section(item, src.file, f"source.vendor[{i}]", items.line_of(i))
        path = _relative_path(sec, "path", "the source", "third_party/glm")
        assert path is not None
        kind = _one_kind(sec, ("archive", "sdist", "git"), ("path", "archive", "sdist", "git", "subdir"),
                         "e.g. archive: {url: https://host/glm-1.0.1.tar.xz, sha256: <64 hex>}")
        sub = sec.section(kind)
        assert sub is not None
        origin: ArchiveOrigin | SdistSource | GitSource
        if kind == "git":
            repo = _git_repo(sub)
            ref = sub.get("ref", str, required=True, fix="the full commit: ref: <40 hex> (git rev-parse TAG^{commit})")
            if not _COMMIT.match(ref):
                raise ConfigError(
                    f"{sub.key_path('ref')} {clip(ref)!r} is not a full commit (40 lowercase hex digits)",
                    where=sub.where("ref"),
                    hint="a vendored git tree is pinned by its commit, which git checks as it fetches (a tag or "
                         "branch can move); write the tag in a comment: git rev-parse TAG^{commit}")
            sub.done(("repo", "ref"))
            origin = GitSource(repo, ref)
        elif kind == "archive":
            url = sub.get("url", str, required=True, fix="the archive's URL (http, https or file)")
            problem = url_problem(url)
            if problem:
                raise ConfigError(f"{sub.key_path('url')}: {problem}", where=sub.where("url"),
                                  hint="give the archive's http(s) URL")
            if not url.lower().split("?")[0].endswith(_ARCHIVE_SUFFIXES):
                raise ConfigError(f"{sub.key_path('url')} {clip(url)!r} does not name an archive farm unpacks",
                                  where=sub.where("url"), hint=f"one of {', '.join(_ARCHIVE_SUFFIXES)}")
            sha = _pinned_sha256(sub)
            sub.done(("url", "sha256"))
            origin = ArchiveOrigin(url, sha)
        else:
            origin = _sdist(sub, "add the file's sha256 (sha256sum FILE)")
        subdir = _relative_path(sec, "subdir", "the archive", "glm-1.0.1", required=False)
        sec.done(("path", kind, "subdir"))
        for earlier in out:  # one tree per place: nested or equal paths would overwrite each other
            a, b = earlier.path + "/", path + "/"
            if a.startswith(b) or b.startswith(a):
                raise ConfigError(f"{sec.path}.path {path!r} overlaps {earlier.path!r} ({earlier.where})",
                                  where=sec.where("path"), hint="give each vendored tree its own folder")
        out.append(VendorSource(path, origin, subdir, sec.where()))
    return tuple(out)


def _pinned_sha256(sec: Section, fix: str = "add the file's sha256 (sha256sum FILE)") -> str:
    sha = sec.get("sha256", str, required=True, fix=fix)
    if not SHA256.match(sha):
        raise ConfigError(f"{sec.key_path('sha256')} must be 64 lowercase hex digits", where=sec.where("sha256"))
    return str(sha)


def _load_rules(sec: Section, defaults: Defaults) -> ArchRules:
    default = arch_spec(sec, "list")
    by_cuda: dict[str, ArchSpec] = {}
    bc = sec.section("by_cuda")
    if bc is not None:
        for cuda in bc.data:
            check_cuda_key(bc, cuda, defaults.cuda_lines, f"{bc.path}")
            by_cuda[cuda] = validate_archs(arch_spec(bc, cuda), cuda)
    by_combo: dict[tuple[str, str], ArchSpec] = {}
    bk = sec.section("by_combo")
    if bk is not None:
        grid_keys = {(r.cuda, r.torch_minor) for r in defaults.grid}
        for key in bk.data:
            m = re.fullmatch(r"(\d{2}\.\d)/(\d+\.\d+)", key)
            if not m:
                raise ConfigError(f"{bk.path} key {key!r} is not 'CUDA/TORCH' like '12.8/2.8'", where=bk.where(key))
            cuda, torch = m[1], m[2]
            check_cuda_key(bk, cuda, defaults.cuda_lines, f"{bk.path}")
            if (cuda, torch) not in grid_keys:
                raise ConfigError(f"{bk.path} key {key!r} matches no grid row", where=bk.where(key),
                                  hint="the grid in _defaults.yml has no such (cuda, torch) combination")
            by_combo[(cuda, torch)] = validate_archs(arch_spec(bk, key), cuda)
    return ArchRules(by_combo, by_cuda, default)


def _load_arch_rules(top: Section, defaults: Defaults) -> tuple[ArchRules, dict[str, ArchRules]]:
    sec = top.section("arch")
    if sec is None:
        return ArchRules(), {}
    # platform groups (x86_64, aarch64), and the platforms of a group with more than one (win_amd64)
    groups = [*sorted(set(PLATFORM_GROUPS.values())), *SPLIT_PLATFORMS]
    by_platform: dict[str, ArchRules] = {}
    rules = _load_rules(sec, defaults)
    for group in groups:
        gsec = sec.section(group)
        if gsec is not None:
            by_platform[group] = _load_rules(gsec, defaults)
            gsec.done(("list", "by_cuda", "by_combo"))
    sec.done(("list", "by_cuda", "by_combo", *groups))
    return rules, by_platform


def _load_extensions(top: Section, defaults: Defaults) -> tuple[ExtensionArchs, ...]:
    sec = top.section("extensions")
    if sec is None:
        return ()
    out = []
    for glob in sec.data:
        if not isinstance(sec.data[glob], YMap):  # one list for every CUDA line
            spec = _extension_spec(sec, glob)
            assert spec is not None
            out.append(ExtensionArchs(glob, spec))
            continue
        # {by_cuda: {line: list}}: an extension the package builds only on some lines
        one = sec.section(glob)
        assert one is not None
        bc = one.section("by_cuda", required=True)
        assert bc is not None
        for cuda in bc.data:
            check_cuda_key(bc, cuda, defaults.cuda_lines, bc.path)
            out.append(ExtensionArchs(glob, validate_archs(_extension_spec(bc, cuda), cuda), cuda))
        one.done(("by_cuda",))
    return tuple(out)


def _extension_spec(sec: Section, key: str) -> ArchSpec | None:
    """An extension's own list, or ``none``: a host-only extension beside CUDA ones (a CPU op
    module), which must then hold no device code."""
    value = sec.data.get(key)
    if isinstance(value, str) and value.strip().lower() == "none":
        sec.seen.add(key)
        return ArchSpec(value, ArchList(frozenset()), sec.where(key))
    return arch_spec(sec, key)


def _load_vendored(top: Section) -> tuple[VendoredLib, ...]:
    sec = top.section("vendored")
    if sec is None:
        return ()
    out = []
    for glob in sec.data:
        if isinstance(sec.data[glob], dict):
            sub = sec.section(glob)
            assert sub is not None
            reason = sub.get("exempt", str, required=True,
                             fix="exempt: 'why its targets need not be asserted "
                                 "(e.g. NVIDIA's cuBLAS as NVIDIA ships it)'")
            sub.done(("exempt",))
            if not reason.strip():
                raise ConfigError(f"{sub.key_path('exempt')} is empty", where=sub.where("exempt"),
                                  hint="an exemption needs a reason a reviewer can check")
            out.append(VendoredLib(glob, None, reason.strip(), sub.where("exempt")))
            continue
        text = sec.get(glob, str,
                       fix=f"write an arch list, 'none' (host-only) or {{exempt: REASON}}: {glob}: '8.0;9.0'")
        where = sec.where(glob)
        archs = (ArchList(frozenset()) if text.strip().lower() == "none"
                 else ArchList.parse(text, where=f"{where} ({sec.key_path(glob)})"))
        out.append(VendoredLib(glob, archs, None, where))
    return tuple(out)


_FAMILY_ARCH = re.compile(r"\d+\.\d[af]?(\+PTX)?")


def _load_families(top: Section) -> tuple[str, tuple[KernelFamily, ...]]:
    """``kernel_families: cmake``, or ``{NAME: {sources: [globs], archs: '9.0a;10.0f', cuda: '>=12.8'}}``."""
    value = top.data.get("kernel_families")
    top.seen.add("kernel_families")
    if value is None:
        return "", ()
    if isinstance(value, str):
        if value != "cmake":
            raise ConfigError(f"kernel_families {value!r} is not known", where=top.where("kernel_families"),
                              hint="write 'kernel_families: cmake' (families read from the package's CMake files), "
                                   "or a mapping NAME: {sources, archs, cuda}")
        return "cmake", ()
    sec = top.section("kernel_families")
    assert sec is not None
    out = []
    for name in sec.data:
        one = sec.section(name)
        if one is None:
            raise ConfigError(f"{sec.key_path(str(name))} must be a mapping", where=sec.where(str(name)),
                              hint="give sources: [globs] and archs: '9.0a;10.0f'")
        sources = one.str_list("sources", required=True) or ()
        if not sources:
            raise ConfigError(f"{one.key_path('sources')} is empty", where=one.where("sources"),
                              hint="list the family's translation units (globs from the build root)")
        archs = one.get("archs", str, required=True, fix="archs: '9.0a;10.0f;12.0f' (as the build writes them)")
        items = [a for a in re.split(r"[;\s]+", archs) if a]
        bad = [a for a in items if not _FAMILY_ARCH.fullmatch(a)]
        if not items or bad:
            raise ConfigError(f"{one.key_path('archs')}: {', '.join(bad) or 'empty'} is not an arch like 9.0a, "
                              "10.0f or 8.0+PTX", where=one.where("archs"), hint="write them as the build does")
        cuda = one.get("cuda", str)
        if cuda is not None and not re.fullmatch(r">=\s*\d+\.\d+", cuda):
            raise ConfigError(f"{one.key_path('cuda')} {cuda!r} is not '>=X.Y'", where=one.where("cuda"),
                              hint="the first CUDA line that builds the family, e.g. '>=12.8'")
        one.done(("sources", "archs", "cuda"))
        out.append(KernelFamily(str(name), tuple(sources), ";".join(items),
                                cuda.removeprefix(">=").strip() if cuda else None, one.where()))
    if not out:
        raise ConfigError("kernel_families is empty", where=top.where("kernel_families"),
                          hint="declare at least one family, or remove the key")
    return "declared", tuple(out)


def _load_ignores(top: Section) -> tuple[LintIgnore, ...]:
    items = top.get("lint_ignore", list, default=YList())
    out = []
    for i, item in enumerate(items):
        sec = Section(item, top.file, f"lint_ignore[{i}]", items.line_of(i))
        rule = sec.get("rule", str, required=True)
        path = sec.get("path", str, required=True, fix="a glob relative to the source root, e.g. csrc/*.cu")
        reason = sec.get("reason", str, required=True, fix="say why this finding is safe to ignore")
        if not reason.strip():
            raise ConfigError("lint_ignore reason is empty", where=sec.where("reason"),
                              hint="say why this finding is safe to ignore")
        sec.done(("rule", "path", "reason"))
        out.append(LintIgnore(rule, path, reason, sec.where()))
    return tuple(out)


def _load_only(top: Section, defaults: Defaults) -> Restriction:
    min_torch = version_str(top, "min_torch", TORCH_MINOR, "2.5") if "min_torch" in top.data else None
    top.seen.add("min_torch")
    sec = top.section("only")
    if sec is None:
        return Restriction(min_torch=min_torch)
    platforms = sec.str_list("platforms")
    for plat in platforms or ():
        if plat not in PLATFORMS:
            raise ConfigError(f"unknown platform {plat!r}", where=sec.where("platforms"),
                              hint=did_you_mean(plat, PLATFORMS) or f"platforms: {', '.join(PLATFORMS)}")
    cuda = sec.str_list("cuda")
    for line in cuda or ():
        if line not in defaults.cuda_lines:
            raise ConfigError(f"only.cuda names unknown CUDA line {line!r}", where=sec.where("cuda"),
                              hint=did_you_mean(line, defaults.cuda_lines) or None)
    combos: tuple[ComboFilter, ...] | None = None
    items = sec.get("combinations", list)
    if items is not None:
        combos = tuple(_combo_filter(sec, item, i, items.line_of(i), defaults) for i, item in enumerate(items))
    sec.done(("platforms", "cuda", "combinations"))
    return Restriction(platforms, cuda, combos, min_torch)


def _combo_filter(sec: Section, item: Any, i: int, line: int, defaults: Defaults) -> ComboFilter:
    csec = Section(item, sec.file, f"only.combinations[{i}]", line)
    cuda = version_str(csec, "cuda", CUDA_LINE, "12.8", required=True)
    check_cuda_key(csec, cuda, defaults.cuda_lines, f"only.combinations[{i}]")
    torch = version_str(csec, "torch", TORCH_MINOR, "2.8")
    pythons = csec.str_list("python")
    csec.done(("cuda", "torch", "python"))
    rows = [r for r in defaults.grid if r.cuda == cuda and (torch is None or r.torch_minor == torch)]
    known = {p for r in rows for p in r.pythons}
    missing = [p for p in pythons or () if p not in known]
    if not rows or missing:
        # a combination that selects nothing would silently drop the package's cells
        what = f"Python {', '.join(missing)} with " if rows else ""
        raise ConfigError(f"only.combinations[{i}] selects {what}CUDA {cuda}"
                          + (f", torch {torch}" if torch else "") + ", which the grid does not have",
                          where=csec.where(), hint=f"the grid in {DEFAULTS_FILE} has: " + ", ".join(
                              f"{r.cuda}/{r.torch_minor}" for r in defaults.grid if r.cuda == cuda))
    return ComboFilter(cuda, torch, pythons)


# ------------------------------------------------------------------------------------------------
# The whole repository
# ------------------------------------------------------------------------------------------------
def load_config(root: Path, *, packages: Iterable[str] | None = None) -> FarmConfig:
    """Load ``_defaults.yml`` and every recipe (or only ``packages``) under ``root``."""
    root = root.resolve()
    defaults = load_defaults(root / DEFAULTS_FILE)
    pkg_dir = root / PACKAGES_DIR
    if not pkg_dir.is_dir():
        raise ConfigError(f"no {PACKAGES_DIR}/ folder", where=str(root), hint="run farm from the farm repository root")
    files = sorted(pkg_dir.glob("*.yml"))
    if packages is not None:
        wanted = list(packages)
        names = {f.stem: f for f in files}
        for name in wanted:
            if name not in names:
                raise UsageError(f"unknown package {name!r}",
                                 hint=did_you_mean(name, names) or f"known packages: {', '.join(sorted(names))}")
        files = [names[n] for n in wanted]
    recipes = {}
    for f in files:
        recipe = load_recipe(f, defaults, root)
        validate_recipe_archs(recipe, defaults)
        recipes[recipe.name] = recipe
    for name, recipe in recipes.items():
        recipes[name] = _link_siblings(recipe, recipes, defaults, root)
    return FarmConfig(root, defaults, recipes)


def _link_siblings(recipe: Recipe, loaded: Mapping[str, Recipe], defaults: Defaults, root: Path) -> Recipe:
    """Resolve the recipes that ``recipe``'s requires_dist and extra_deps placeholders name
    (loading them if needed): another recipe's wheel of the same cell, at run time or to build."""
    siblings: dict[str, SiblingPin] = {}
    for req in (*recipe.requires_dist, *recipe.build.extra_deps):
        for kind, name in requirement_refs(req):
            if name not in siblings:
                other = loaded.get(name) or _load_sibling(recipe, req, name, defaults, root)
                siblings[name] = SiblingPin(other.version, other.links_torch)
            if kind == "local" and siblings[name].links_torch and not recipe.links_torch:
                raise ConfigError(f"requirement {req!r}: {name} links torch, {recipe.name} does not",
                                  where=recipe.display, hint=f"a torch-free wheel cannot pin {name}'s per-torch wheel")
    return replace(recipe, siblings=siblings) if siblings else recipe


def _load_sibling(recipe: Recipe, req: str, name: str, defaults: Defaults, root: Path) -> Recipe:
    path = root / PACKAGES_DIR / f"{name}.yml"
    if not path.is_file():
        known = [p.stem for p in (root / PACKAGES_DIR).glob("*.yml")]
        raise ConfigError(f"requires_dist entry {req!r} names {name!r}, which has no recipe",
                          where=recipe.display, hint=did_you_mean(name, known) or None)
    return load_recipe(path, defaults, root)


def validate_recipe_archs(recipe: Recipe, defaults: Defaults) -> None:
    """Every package-wide arch list must build on every CUDA line the package builds on."""
    lines = [c for c in defaults.cuda_lines if recipe.only.cuda is None or c in recipe.only.cuda]
    if recipe.only.combinations is not None:
        lines = [c for c in lines if any(f.cuda == c for f in recipe.only.combinations)]
    for ext in recipe.extensions:  # an extension's own list applies on every line too
        for cuda in lines if ext.cuda is None else ():  # per-line lists were checked against their line
            try:
                validate_for_cuda(ext.spec.archs, cuda, where=ext.spec.where)
            except ArchError as exc:
                raise ArchError(
                    f"{exc.message}; extensions[{ext.glob!r}] applies to CUDA {cuda}",
                    where=exc.where,
                    hint="use arches every CUDA line of the package builds, or only.cuda to skip lines",
                ) from None
    for rules in (recipe.arch, *recipe.arch_by_platform.values()):
        if rules.default is None:
            continue
        for cuda in lines:
            if cuda in rules.by_cuda:
                continue  # overridden for that line
            try:
                validate_for_cuda(rules.default.archs, cuda, where=rules.default.where)
            except ArchError as exc:
                raise ArchError(
                    f"{exc.message}; the package-wide arch list applies to CUDA {cuda}",
                    where=exc.where, hint=f"add arch.by_cuda['{cuda}'] for that line, or only.cuda to skip it",
                ) from None
