"""The wheel-variant channel of a static index (PEP 825): each asserted wheel of ``files/`` again,
as a variant wheel that installers implementing wheel variants (uv 0.13.9 with
``--preview-features wheel-variants``) select by GPU and driver.

Layout, beside the PEP 503 tree (every path relative to its root)::

    variants/files/<wheel stem>-<label>.whl            each asserted wheel as a variant wheel
    variants/files/<wheel stem>-<label>.whl.metadata   its METADATA (PEP 658), byte for byte
    variants/files/<name>-<version>-variants.json      every variant of that version: the labels
                                                       and their properties (the index-level metadata)
    variants/cu128/torch2.8/<project>/index.html       the tree's channels, listing only variant
    variants/cu128/<project>/index.html                wheels and their versions' variants.json
    variants/packages.json                             what the channel lists (as packages.json)

A variant wheel is its asserted wheel's bytes with ``.dist-info/variant.json`` added and RECORD
updated (:func:`farm.provenance.stamp.add_to_dist_info`): its properties
(:mod:`farm.publish.variants`) come from the wheel's provenance, which the ledger vouches for, and
its label is the reference library's hash of them. The channel is a function of ``files/`` and the
ledger: every regeneration makes each variant again and rewrites only what differs, so a variant
file changed in the tree is replaced, never believed. It lists no wheel that is not a variant (an
installer falls back to a non-variant wheel when no variant fits, which would install one that
fails), so a GPU or driver no variant serves gets a refusal. The metadata files are written with
``variantlib`` (the ``upload`` extra), imported only when the channel is on.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from packaging.utils import canonicalize_name, parse_wheel_filename

from farm import DISTRIBUTION
from farm.errors import DefectError, FarmError, ToolError
from farm.fsutil import fsync_dir, open_plain, sha256_file, sweep_leftovers, temp_prefix, writing
from farm.provenance import stamp
from farm.provenance.buildinfo import BUILD_INFO_NAME, BuildInfo
from farm.publish import index
from farm.publish.variants import NAMESPACE, LeftOut, VariantProps, properties
from farm.publish.wheelmeta import read_member

DIR = "variants"
FOLDER = f"{DIR}/{index.FILES}"  # where the variant wheels live in the tree
DIST_INFO_FILE = "variant.json"
# NVIDIA's provider: uv 0.13.9 runs its own built-in copy for exactly this requirement (a version
# range above 0.0.1 makes it skip the namespace); other installers install the plugin.
PROVIDER_REQUIRES = "nvidia-variant-provider"
PROVIDER_API = "nvidia_variant_provider.plugin:NvidiaVariantPlugin"
# variantlib 0.2.2 writes the format's version 0.2.0 under an older address, which uv 0.13.9 logs
# as an unknown schema; this is the address uv knows for that version.
SCHEMA = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"


def require() -> None:
    """Fail before anything is published when the reference library is missing."""
    try:
        import variantlib  # noqa: F401, PLC0415 (the upload extra's, optional)
    except ImportError:
        raise ToolError(
            "the wheel-variant channel needs variantlib, which is not installed",
            hint=f"pip install '{DISTRIBUTION}[upload]', or set variants: false on the index target",
        ) from None


# --------------------------------------------------------------------------------------------
# The format, written with the reference library
# --------------------------------------------------------------------------------------------
def _normalised(text: str) -> bytes:
    doc = json.loads(text)
    doc["$schema"] = SCHEMA
    return (json.dumps(doc, indent=4, sort_keys=True) + "\n").encode()


def dist_info(props: VariantProps) -> tuple[str, bytes]:
    """The label and the ``variant.json`` of a variant wheel with ``props``."""
    from variantlib.api import VariantDescription, VariantProperty, make_variant_dist_info  # noqa: PLC0415 (optional)
    from variantlib.models.variant_info import ProviderInfo, VariantInfo  # noqa: PLC0415 (optional)

    info = VariantInfo(namespace_priorities=[NAMESPACE],
                       providers={NAMESPACE: ProviderInfo(requires=[PROVIDER_REQUIRES], plugin_api=PROVIDER_API)})
    vdesc = VariantDescription([VariantProperty(ns, feature, value) for ns, feature, value in props.properties()])
    return vdesc.label, _normalised(make_variant_dist_info(vdesc, variant_info=info))


def versions_json(dist_infos: Iterable[bytes]) -> bytes:
    """``{name}-{version}-variants.json``: the ``variant.json`` of each variant of a version, merged
    (a label with two property sets is refused)."""
    from variantlib.errors import ValidationError  # noqa: PLC0415 (optional)
    from variantlib.variant_dist_info import VariantDistInfo  # noqa: PLC0415 (optional)
    from variantlib.variants_json import VariantsJson  # noqa: PLC0415 (optional)

    parsed = [VariantDistInfo(data) for data in dist_infos]
    merged = VariantsJson(parsed[0])
    try:
        for one in parsed:
            merged.merge(one)
    except ValidationError as exc:
        raise DefectError(f"variants of one version disagree: {exc}",
                          hint="report it: a label is the hash of its properties") from None
    return _normalised(merged.to_str())


# --------------------------------------------------------------------------------------------
# One variant wheel
# --------------------------------------------------------------------------------------------
class _Sink:
    """Counts and hashes what a zip writer writes, keeping nothing; it cannot seek, and the
    variant writer never needs to (every member's size is known before it is written)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def seek(self, *_: object) -> int:
        raise OSError("not seekable")

    def flush(self) -> None:
        pass


@dataclass(frozen=True)
class WheelVariant:
    """One asserted wheel of ``files/`` as a variant wheel."""

    base: index.IndexFile
    label: str
    props: VariantProps
    dist_info: bytes  # its variant.json
    metadata: bytes  # its METADATA
    sha256: str
    size: int

    @property
    def filename(self) -> str:
        return f"{self.base.filename.removesuffix('.whl')}-{self.label}.whl"

    @property
    def name_version(self) -> str:
        """``{name}-{version}`` as wheel file names spell them (the variants.json's name)."""
        name, version, _, _ = parse_wheel_filename(self.base.filename)
        return f"{canonicalize_name(name).replace('-', '_')}-{version}"

    def describe(self) -> str:
        return (f"{self.filename}: sm_arch {', '.join(self.props.sm_arch)}; "
                f"a driver of CUDA {self.props.lower_bound} or newer")

    def file(self) -> index.IndexFile:
        return replace(self.base, filename=self.filename, sha256=self.sha256, size=self.size,
                       metadata_sha256=hashlib.sha256(self.metadata).hexdigest(), url=None)


def make(root: Path, f: index.IndexFile) -> WheelVariant | LeftOut:
    """The variant of the stored wheel ``files/<f.filename>`` (hashed, not written), or why it has none."""
    path = Path(root) / index.FILES / f.filename
    data = read_member(path, BUILD_INFO_NAME)
    if data is None:
        return LeftOut(f"no {BUILD_INFO_NAME}")
    props = properties(BuildInfo.from_json(data, where=str(path)))
    if isinstance(props, LeftOut):
        return props
    label, vjson = dist_info(props)
    metadata = read_member(path, "METADATA")
    if metadata is None:
        return LeftOut("no .dist-info/METADATA")
    sink = _Sink()
    stamp.add_to_dist_info(path, sink, DIST_INFO_FILE, vjson)  # type: ignore[arg-type]
    return WheelVariant(f, label, props, vjson, metadata, sink.digest.hexdigest(), sink.size)


def _holds(dst: Path, v: WheelVariant) -> bool:
    """``dst`` is a plain file with ``v``'s bytes (a link, a FIFO or another size is not: it is
    replaced, never read through)."""
    try:
        with open_plain(dst) as fh:
            if os.fstat(fh.fileno()).st_size != v.size:
                return False
            digest = hashlib.sha256()
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except (OSError, ValueError):
        return False
    return digest.hexdigest() == v.sha256


def _store(root: Path, v: WheelVariant) -> bool:
    """Write ``v`` under ``variants/files/`` unless the file there has its bytes; True: written."""
    dst = root / DIR / index.FILES / v.filename
    if _holds(dst, v):
        return False
    with writing(dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dst.parent, prefix=temp_prefix(dst.name), suffix=".part")
    tmp = Path(tmp_name)
    try:
        with writing(dst), os.fdopen(fd, "wb") as fh:
            stamp.add_to_dist_info(root / index.FILES / v.base.filename, fh, DIST_INFO_FILE, v.dist_info)
            fh.flush()
            os.fsync(fh.fileno())
        if sha256_file(tmp) != v.sha256:  # the wheel changed between the two passes
            raise DefectError(f"{index.FILES}/{v.base.filename} changed while its variant was made",
                              where=str(root), hint="run it again on a tree nothing else writes")
        tmp.chmod(0o644)
        tmp.replace(dst)
        fsync_dir(dst.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


# --------------------------------------------------------------------------------------------
# The channel's pages (pure)
# --------------------------------------------------------------------------------------------
def _json_link(name: str, data: bytes, prefix: str) -> str:
    return (f'<a href="{prefix}{index.FILES}/{quote(name)}#sha256={hashlib.sha256(data).hexdigest()}">'
            f"{html.escape(name)}</a>")


def render(variants: Iterable[WheelVariant]) -> dict[str, bytes]:
    """Every file of the channel but the wheels (path under ``variants/`` -> bytes)."""
    variants = sorted(variants, key=lambda v: v.filename)
    by_version: dict[str, list[WheelVariant]] = {}
    for v in variants:
        by_version.setdefault(v.name_version, []).append(v)
    out: dict[str, bytes] = {}
    json_names: dict[str, str] = {}  # name_version -> its variants.json's name
    for nv, vs in by_version.items():
        json_names[nv] = f"{nv}-variants.json"
        out[f"{index.FILES}/{json_names[nv]}"] = versions_json(v.dist_info for v in vs)
    for v in variants:
        out[f"{index.FILES}/{v.filename}.metadata"] = v.metadata
    files = {v.filename: v for v in variants}

    def json_links(pfiles: list[index.IndexFile], up: str) -> list[str]:
        names = (json_names[nv] for nv in sorted({files[f.filename].name_version for f in pfiles}))
        return [_json_link(name, out[f"{index.FILES}/{name}"], up) for name in names]

    by_channel = index.channels(v.file() for v in variants)
    out.update(index.channel_pages(by_channel, "Wheel variants", json_links))
    out[index.PACKAGES_JSON] = (json.dumps(index.packages_json((v.file() for v in variants), by_channel),
                                           indent=2, sort_keys=True) + "\n").encode()
    return out


# --------------------------------------------------------------------------------------------
# I/O shell
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VariantReport:
    root: Path
    made: Mapping[str, WheelVariant]  # stored wheel -> its variant
    channels: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (wheel, why it has no variant)
    written: tuple[str, ...]  # paths under variants/ whose bytes changed
    removed: tuple[str, ...]


def regenerate(root: Path, lookup: index.EntryLookup, *, allow_drop: Iterable[str] = ()) -> VariantReport:
    """Rewrite the channel under ``root/variants/`` from ``root/files/`` and the ledger."""
    root = Path(root)
    require()
    with index.locked(root):
        return _regenerate(root, lookup, allow_drop)


def _regenerate(root: Path, lookup: index.EntryLookup, allow_drop: Iterable[str]) -> VariantReport:
    files_dir = root / index.FILES
    names = sorted(p.name for p in files_dir.glob("*.whl")) if files_dir.is_dir() else []
    variants: list[WheelVariant] = []
    left_out: list[tuple[str, str]] = []
    for name in names:
        f = index.stored(root, name, lookup)  # the ledger vouches for these bytes
        try:
            got = make(root, f)
        except FarmError as exc:
            got = LeftOut(exc.message)
        if isinstance(got, LeftOut):
            left_out.append((name, got.reason))
        else:
            variants.append(got)
    out = root / DIR
    for folder in (out, out / index.FILES):
        if folder.is_symlink():
            raise DefectError(f"{folder.relative_to(root)} is a symbolic link: the channel is written only into "
                              "the tree's own folders", where=str(root), hint=f"remove {folder} and run it again")
    pages = render(variants)
    old = index.read_packages_json(out)
    new: Mapping[str, Any] = json.loads(pages[index.PACKAGES_JSON])
    index.refuse_lost(old, new, allow_drop, "the wheel-variant channel", out)
    sweep_leftovers(out / index.FILES)
    written = [f"{index.FILES}/{v.filename}" for v in variants if _store(root, v)]
    report = index.write_pages(out, pages, old, new)
    keep = {f"{index.FILES}/{v.filename}" for v in variants} | set(pages)
    removed = _prune(out, keep)
    return VariantReport(root, {v.base.filename: v for v in variants}, tuple(new.get("channels", {})), tuple(left_out),
                         tuple(written) + report.written, report.removed + tuple(removed))


def _prune(out: Path, keep: set[str]) -> list[str]:
    """Files under ``variants/files/`` the channel no longer makes (their wheel left files/)."""
    removed = []
    folder = out / index.FILES
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        rel = f"{index.FILES}/{path.name}"
        if rel not in keep and not path.name.startswith("."):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(rel)
    return removed
