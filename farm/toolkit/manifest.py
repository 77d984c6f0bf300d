"""NVIDIA's ``redistrib_<X.Y.Z>.json``, parsed once into frozen objects (pure: no I/O).

The manifest has top-level strings (``release_date``, ``release_label``, ``release_product``)
beside one object per component (``cuda_nvcc``, ``libcublas``, ...) with ``name``, ``version``,
``license`` and one object per platform holding ``relative_path``, ``sha256``, ``md5`` and
``size``, in every release farm assembles. Anything else is refused with the manifest's URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from farm import jsonread
from farm.errors import ToolError, UsageError, did_you_mean

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Archive:
    relative_path: str  # under the redist root: cuda_nvcc/linux-x86_64/cuda_nvcc-...-archive.tar.xz
    sha256: str
    size: int

    @property
    def stem(self) -> str:
        """The one top folder the archive unpacks to (its file name without .tar.xz/.zip)."""
        name = self.relative_path.rsplit("/", 1)[-1]
        return name.removesuffix(".tar.xz") if name.endswith(".tar.xz") else name.removesuffix(".zip")


@dataclass(frozen=True)
class ManifestComponent:
    key: str  # cuda_nvcc
    name: str  # "CUDA NVCC"
    version: str
    archives: Mapping[str, Archive]  # platform -> archive


@dataclass(frozen=True)
class Manifest:
    url: str
    sha256: str
    release_label: str | None
    components: Mapping[str, ManifestComponent]

    def select(self, names: Sequence[str], platform: str) -> tuple[tuple[ManifestComponent, Archive], ...]:
        """The archives of ``names`` for ``platform``; an unknown name lists the manifest's keys."""
        out = []
        for name in names:
            comp = self.components.get(name)
            if comp is None:
                hint = did_you_mean(name, self.components)
                raise UsageError(
                    f"component {name!r} is not in {self.url}",
                    hint=(hint + "; " if hint else "") + f"the manifest has: {', '.join(sorted(self.components))}",
                )
            archive = comp.archives.get(platform)
            if archive is None:
                raise ToolError(f"{self.url} has no {platform} archive of {name}",
                                hint=f"{name} is published for: {', '.join(sorted(comp.archives)) or 'no platform'}")
            out.append((comp, archive))
        return tuple(out)


def _bad(url: str, why: str) -> ToolError:
    return ToolError(f"{url} is not a CUDA redistrib manifest: {why}",
                     hint="check the redist root (--redist-url / FARM_CUDA_REDIST_URL) and the release")


def parse_manifest(data: bytes, *, url: str, sha256: str) -> Manifest:
    try:
        doc = jsonread.loads(data)
    except ValueError as exc:
        raise _bad(url, f"not JSON farm reads ({exc})") from None
    if not isinstance(doc, dict):
        raise _bad(url, "not a JSON object")
    components: dict[str, ManifestComponent] = {}
    for key, value in doc.items():
        if not isinstance(value, dict):  # release_date, release_label, release_product
            continue
        version = value.get("version")
        if not isinstance(version, str):
            raise _bad(url, f"component {key!r} has no version")
        archives: dict[str, Archive] = {}
        for plat, entry in value.items():
            if not isinstance(entry, dict):
                continue  # name, license, version
            path, digest, size = entry.get("relative_path"), entry.get("sha256"), entry.get("size")
            if isinstance(size, str) and size.isdigit():
                size = int(size)  # NVIDIA writes sizes as strings
            if (not isinstance(path, str) or not isinstance(digest, str) or not _SHA256.match(digest)
                    or not isinstance(size, int) or isinstance(size, bool) or size < 0):
                raise _bad(url, f"{key}.{plat} lacks a relative_path, sha256 or size")
            if path.startswith("/") or ".." in path.split("/") or "://" in path:
                raise _bad(url, f"{key}.{plat} relative_path {path!r} leaves the redist root")
            archives[plat] = Archive(path, digest, size)
        components[key] = ManifestComponent(key, str(value.get("name", key)), version, archives)
    if not components:
        raise _bad(url, "it lists no component")
    label = doc.get("release_label")
    return Manifest(url, sha256, label if isinstance(label, str) else None, components)
