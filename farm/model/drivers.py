"""Driver versions: which NVIDIA driver a CUDA binary needs, from NVIDIA's published tables.

Two requirements, and a binary must meet both:

- **the CUDA runtime** it was built against: under minor version compatibility a CUDA 12.x
  binary runs on any driver of branch 525 or newer (13.x: 580, 11.x: 450), whatever its minor;
- **the PTX it JIT-compiles**: the driver's JIT reads PTX up to the ISA of the toolkit it shipped
  with. PTX from a newer toolkit fails to load (``cudaErrorUnsupportedPtxVersion``, 222) even
  where SASS of the same binary would run: a CUDA 12.8 wheel JITs on branch 570+, not on 550.

The numbers live in ``driver_versions.json`` beside this module, with the page each comes from.
Decisions compare branches (the driver's first number, the same on Linux and Windows); the exact
versions NVIDIA prints are carried for messages.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from farm.errors import UsageError

DATA = Path(__file__).with_name("driver_versions.json")
UNSUPPORTED_PTX = "cudaErrorUnsupportedPtxVersion (222): the provided PTX was compiled with an unsupported toolchain"
INSUFFICIENT = "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime version"


@dataclass(frozen=True, order=True)
class DriverVersion:
    """An installed driver, e.g. ``550.54.14``; ``branch`` is 550."""

    parts: tuple[int, ...]
    text: str  # as the driver prints it: 580.159.04 keeps its zero

    @property
    def branch(self) -> int:
        return self.parts[0]

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> DriverVersion:
        m = re.fullmatch(r"\s*(\d{2,4})((?:\.\d{1,4}){0,3})\s*", text)
        if not m:
            raise UsageError(f"{text[:40]!r} is not a driver version", where=where,
                             hint="write it as nvidia-smi prints it, e.g. 550.54 or 580.65.06")
        return cls((int(m[1]), *(int(p) for p in m[2].split(".")[1:])), text.strip())


@dataclass(frozen=True)
class Requirement:
    """A driver a binary needs: ``branch`` or newer (``shown``: NVIDIA's exact number)."""

    branch: int
    shown: str
    why: str  # "the CUDA 12.x runtime", "PTX ISA 8.7 (CUDA 12.8)"
    source: str  # the page the number comes from
    error: str  # what the runtime says when the driver is older

    def met_by(self, driver: DriverVersion) -> bool:
        return driver.branch >= self.branch

    def describe(self) -> str:
        return f"driver >= {self.shown} for {self.why}"


@dataclass(frozen=True)
class Release:
    cuda: str  # "12.8"
    ptx_isa: str  # "8.7"
    branch: int
    linux: str  # the driver the toolkit shipped with


def release_key(text: str) -> tuple[int, ...]:
    """``12.8`` -> (12, 8): CUDA releases and PTX ISAs compared as numbers."""
    return tuple(int(p) for p in text.split("."))


@dataclass(frozen=True)
class DriverTable:
    runtime: dict[int, tuple[int, str, str, str]]  # CUDA major -> (branch, linux, windows, source)
    releases: tuple[Release, ...]  # oldest first
    sources: dict[str, str]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DriverTable:
        sources = {str(k): str(v) for k, v in doc["sources"].items()}
        runtime = {int(r["cuda_major"]): (int(r["branch"]), str(r["linux"]), str(r["windows"]),
                                          sources[r["source"]]) for r in doc["runtime_minimum"]}
        releases = tuple(sorted((Release(str(r["cuda"]), str(r["ptx_isa"]), int(r["branch"]), str(r["linux"]))
                                 for r in doc["releases"]), key=lambda r: release_key(r.cuda)))
        return cls(runtime, releases, sources)

    def runtime_minimum(self, cuda: str, platform: str | None = None) -> Requirement | None:
        """The driver a binary built with CUDA ``cuda`` ("12.8") needs to start; None: unknown line."""
        major = release_key(cuda)[0]
        if major not in self.runtime:
            return None
        branch, linux, windows, source = self.runtime[major]
        shown = windows if platform and platform.startswith("win") else linux
        return Requirement(branch, shown, f"the CUDA {major}.x runtime (minor version compatibility)",
                           source, INSUFFICIENT)

    def ptx_isa(self, cuda: str) -> str | None:
        """The PTX ISA that the nvcc of CUDA ``cuda`` writes ("13.0" -> "9.0")."""
        key = release_key(cuda)[:2]
        return next((r.ptx_isa for r in self.releases if release_key(r.cuda) == key), None)

    def ptx_minimum(self, isa: str) -> Requirement | None:
        """The oldest driver whose JIT reads PTX of ISA ``isa``; None: newer than every known release."""
        want = release_key(isa)
        first = next((r for r in self.releases if release_key(r.ptx_isa) >= want), None)
        if first is None:
            return None
        return Requirement(first.branch, first.linux, f"PTX ISA {isa} (CUDA {first.cuda}) to JIT",
                           self.sources["toolkit_drivers"], UNSUPPORTED_PTX)

    def newest_cuda(self, driver: DriverVersion) -> str | None:
        """The newest CUDA release whose PTX this driver's JIT reads (``nvidia-smi``'s "CUDA Version")."""
        fits = [r for r in self.releases if r.branch <= driver.branch]
        return fits[-1].cuda if fits else None

    def reported_cuda(self, branch: int) -> str | None:
        """The CUDA version (``cuDriverGetVersion``, nvidia-smi's "CUDA Version") that every driver
        of ``branch`` or newer reports at least: 525 -> "12.0", 570 -> "12.8"; None: newer than
        every known release."""
        return next((r.cuda for r in self.releases if r.branch >= branch), None)


@cache
def table() -> DriverTable:
    """The table shipped with farm (read once)."""
    doc: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return DriverTable.from_json(doc)


def requirements(cuda: str | None, ptx_isa: str | None, *, has_ptx: bool,
                 platform: str | None = None) -> list[Requirement]:
    """Every driver requirement of a binary built with CUDA ``cuda`` whose PTX (if ``has_ptx``)
    has ISA ``ptx_isa`` (default: the ISA of ``cuda``'s nvcc)."""
    t = table()
    isa = ptx_isa or (t.ptx_isa(cuda) if cuda else None)
    found = (t.runtime_minimum(cuda, platform) if cuda else None, t.ptx_minimum(isa) if has_ptx and isa else None)
    return [r for r in found if r is not None]


def minimum_driver(reqs: list[Requirement]) -> Requirement | None:
    """The one requirement that binds (the highest branch)."""
    return max(reqs, key=lambda r: r.branch, default=None)
