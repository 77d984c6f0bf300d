"""Which toolkit a build needs, decided from the pins in ``_defaults.yml`` (pure: no I/O).

A :class:`ToolkitRequest` names everything that makes one toolkit: the CUDA line, the source
(NVIDIA's redistributable archives or its PyPI wheels), the release, the platform and the
components. Its :meth:`~ToolkitRequest.key` identifies an assembly in the cache, so two requests
for the same components share one toolkit and a changed pin makes a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from farm.errors import ConfigError, ToolError, UsageError, did_you_mean
from farm.model.config import ToolkitConfig, release_problem, url_problem
from farm.toolkit import components as comps

SOURCES = ("redist", "pypi")
# NVIDIA's platform names, and farm's (wheel platform tags) for the same machines.
PLATFORMS: dict[str, str] = {
    "linux-x86_64": "linux_x86_64",
    "linux-sbsa": "linux_aarch64",
    "windows-x86_64": "win_amd64",
}
REDIST_URL_ENV = "FARM_CUDA_REDIST_URL"
# Bump when the assembled layout changes, so cached toolkits are rebuilt.
LAYOUT_VERSION = 4  # 3: libX.so for a library shipped only as libX.so.N.M; 4: lib/stubs/libcuda.so


@dataclass(frozen=True)
class ToolkitRequest:
    cuda: str  # the line, "12.8"
    source: str  # redist | pypi
    release: str  # "12.8.1"
    platform: str  # NVIDIA's name: linux-x86_64 | linux-sbsa | windows-x86_64
    components: tuple[str, ...]  # manifest keys, in order: the line's, torch's, the recipe's
    redist_url: str  # the redist root, ending in "/"
    manifest_sha256: str | None  # pinned; None where not known yet
    pypi: tuple[str, ...] = ()  # the pinned wheels (source pypi)
    pinned: tuple[str, ...] = field(default=(), compare=False)  # every line's release, for error messages

    @property
    def manifest_url(self) -> str:
        return f"{self.redist_url}redistrib_{self.release}.json"

    def key(self) -> str:
        """Identity of an assembly: changes with the release, the platform, the components or a pin."""
        text = json.dumps([self.source, self.release, self.platform, sorted(self.components),
                           sorted(self.pypi), self.manifest_sha256, LAYOUT_VERSION])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def slug(self) -> str:
        """A cache folder name that says what is inside: ``redist-12.8.1-linux-x86_64-<key>``."""
        return f"{self.source}-{self.release}-{self.platform}-{self.key()}"

    def to_json(self) -> dict[str, object]:
        return {
            "cuda": self.cuda, "source": self.source, "release": self.release, "platform": self.platform,
            "components": list(self.components),
            "manifest_url": self.manifest_url if self.source == "redist" else None,
            "manifest_sha256": self.manifest_sha256,
            "pypi": list(self.pypi),
        }


def platform_name(text: str) -> str:
    """NVIDIA's platform name from either spelling (``linux_x86_64`` or ``linux-x86_64``)."""
    if text in PLATFORMS:
        return text
    for redist, farm in PLATFORMS.items():
        if text == farm:
            return redist
    known = [*PLATFORMS, *PLATFORMS.values()]
    raise UsageError(f"unknown platform {text!r}", hint=did_you_mean(text, known) or f"platforms: {', '.join(known)}")


def request_for(
    config: ToolkitConfig,
    cuda: str,
    *,
    torch: bool = False,
    extra: Sequence[str] = (),
    source: str | None = None,
    release: str | None = None,
    platform: str = "linux-x86_64",
    redist_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolkitRequest:
    """The toolkit for CUDA line ``cuda``: the line's components, torch's when ``torch``, then ``extra``.

    ``source``/``release``/``redist_url`` override the pins (``redist_url`` also from
    ``$FARM_CUDA_REDIST_URL``). A line without a pin, an unknown source or component is bad input.
    """
    line = config.lines.get(cuda)
    if line is None:
        pinned = ", ".join(f"{c} ({p.release})" for c, p in config.lines.items()) or "none"
        raise UsageError(f"no toolkit is pinned for CUDA {cuda!r}",
                         hint=f"pinned lines: {pinned}; pin the line's release under toolkit.lines in _defaults.yml")
    platform = platform_name(platform)
    if source is not None and source not in SOURCES:
        raise UsageError(f"unknown toolkit source {source!r}", hint=f"sources: {', '.join(SOURCES)}")
    chosen = source or line.source
    if chosen == "pypi" and platform.startswith("windows"):
        if source == "pypi":
            raise UsageError(f"the PyPI toolkit is assembled for Linux only, not {platform}",
                             hint="use --source redist (NVIDIA's archives cover every platform)")
        chosen = "redist"  # the line's default, where its wheels cannot serve
    if chosen == "pypi" and cuda.split(".", maxsplit=1)[0] == "12":
        raise ToolError(f"CUDA {cuda} cannot be assembled from PyPI: NVIDIA's CUDA 12 wheels ship no nvcc "
                        "(nvidia-cuda-nvcc-cu12 holds ptxas only) and no libcudart_static.a",
                        hint="use --source redist")
    wanted = list(dict.fromkeys((*line.components, *(config.torch_components if torch else ()), *extra)))
    rel = release or line.release
    problem = release_problem(rel, cuda)
    if problem:
        raise UsageError(f"--release {problem}", hint=f"e.g. --release {line.release}")
    pins: tuple[str, ...] = ()
    if chosen == "pypi":
        if rel != line.release:
            raise UsageError(f"the PyPI wheels of CUDA {cuda} are pinned for release {line.release}, not {rel}",
                             hint="use --source redist for another release")
        unknown = [c for c in wanted if c not in line.pypi or c not in comps.PYPI_WHEELS]
        if unknown:
            hint = did_you_mean(unknown[0], line.pypi)
            raise UsageError(f"no PyPI wheel is pinned for component(s) {', '.join(unknown)} of CUDA {cuda}",
                             hint=(hint + "; " if hint else "")
                             + f"pinned: {', '.join(sorted(line.pypi))}; or use --source redist")
        pins = tuple(comps.pypi_requirement(c, line.pypi[c], cuda) for c in wanted)
    env = env if env is not None else {}
    root = redist_url or env.get(REDIST_URL_ENV) or config.redist_url
    problem = url_problem(root)
    if problem:
        flag = "--redist-url" if redist_url else f"${REDIST_URL_ENV}" if env.get(REDIST_URL_ENV) else "redist_url"
        raise UsageError(f"{flag} {problem}", hint="e.g. https://developer.download.nvidia.com/compute/cuda/redist/")
    root = root if root.endswith("/") else root + "/"
    # The pin holds for NVIDIA's root. Another root (a mirror, an air-gapped copy) is trusted as its
    # operator configured it: its manifest's own sha256 is recorded, and every archive is still
    # checked against that manifest.
    default_root = config.redist_url if config.redist_url.endswith("/") else config.redist_url + "/"
    digest = line.manifest_sha256 if rel == line.release and root == default_root else None
    every_line = tuple(f"{c}: {p.release}" for c, p in config.lines.items())
    return ToolkitRequest(cuda, chosen, rel, platform, tuple(wanted), root, digest, pins, every_line)


def runtime_wheels(config: ToolkitConfig, cuda: str, components: Sequence[str], *, where: str) -> tuple[str, ...]:
    """NVIDIA's PyPI wheels of ``components`` for CUDA line ``cuda``, pinned as the line's ``pypi``
    map pins them (``nvidia-cuda-nvrtc==13.0.88``, ``nvidia-cuda-nvrtc-cu12==12.8.93``): what a
    recipe's ``verify.runtime_libs`` installs into the import check's environment. ``where``: the
    recipe, for the error of a component that is no runtime library or that the line does not pin."""
    line = config.lines.get(cuda)
    out = []
    for name in components:
        if name not in comps.RUNTIME_LIBRARIES:
            raise ConfigError(f"verify.runtime_libs entry {name!r} is no CUDA runtime library", where=where,
                              hint=did_you_mean(name, comps.RUNTIME_LIBRARIES)
                              or f"runtime libraries: {', '.join(comps.RUNTIME_LIBRARIES)}")
        if line is None or name not in line.pypi:
            raise ConfigError(f"verify.runtime_libs names {name}, and CUDA {cuda} pins no PyPI wheel for it",
                              where=where, hint=f"pin its wheel's version under toolkit.lines.'{cuda}'.pypi in "
                                                f"_defaults.yml (the version of {name} in the line's release)")
        out.append(comps.pypi_requirement(name, line.pypi[name], cuda))
    return tuple(out)
