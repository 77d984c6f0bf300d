"""The driver model: which image of a fatbin a GPU of compute capability D runs.

For a device D the driver picks, in order (measured on an H200, driver 580):

1. the highest SASS ``sm_X`` with X's major == D's major and X's minor <= D's
   (``sm_Xa`` only when X == D; ``sm_Xf`` within the family, minor <= D's);
2. else the highest PTX ``compute_Y`` with Y <= D, JIT-compiled (``compute_Ya`` only when Y == D,
   ``compute_Yf`` only within Y's family);
3. else nothing: ``cudaErrorNoKernelImageForDevice``.

Code then runs with ``__CUDA_ARCH__`` of the chosen image, not of the device.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from farm.errors import ArchError
from farm.model.arch import ArchList, Kind, Target, Variant


@dataclass(frozen=True, order=True)
class Device:
    """A compute capability, e.g. 9.0 for H100/H200, 8.9 for Ada."""

    major: int
    minor: int

    @property
    def number(self) -> int:
        return self.major * 10 + self.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: str) -> Device:
        m = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", text)
        if not m:
            raise ArchError(f"{text!r} is not a compute capability", hint="write it like 8.9 or 12.0")
        return cls(int(m[1]), int(m[2]))


# The device capabilities the farm reasons about (data, not code).
KNOWN_DEVICES: tuple[Device, ...] = tuple(
    Device(a, b)
    for a, b in ((7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0), (12, 0), (12, 1))
)


class ImageKind(enum.Enum):
    SASS = "sass"
    PTX_JIT = "ptx-jit"
    NONE = "none"


@dataclass(frozen=True)
class Choice:
    """What the driver runs on ``device``: the image and the ``__CUDA_ARCH__`` its code sees."""

    device: Device
    kind: ImageKind
    target: Target | None

    @property
    def cuda_arch(self) -> int | None:
        return self.target.cuda_arch if self.target else None

    def describe(self) -> str:
        if self.target is None:
            return "no image: cudaErrorNoKernelImageForDevice"
        if self.kind is ImageKind.SASS:
            return f"runs {self.target.name} SASS (__CUDA_ARCH__ {self.cuda_arch})"
        return f"JIT-compiles {self.target.name} PTX (__CUDA_ARCH__ {self.cuda_arch})"


def _sass_runs_on(t: Target, d: Device) -> bool:
    if t.major != d.major or t.minor > d.minor:
        return False
    if t.variant is Variant.ARCH:
        return t.minor == d.minor
    return True  # plain and family-specific SASS: same major, minor <= D's


def _ptx_runs_on(t: Target, d: Device) -> bool:
    if t.variant is Variant.ARCH:
        return t.number == d.number
    if t.variant is Variant.FAMILY:
        return t.major == d.major and t.minor <= d.minor
    return t.number <= d.number


_SPECIFICITY = {Variant.NONE: 0, Variant.FAMILY: 1, Variant.ARCH: 2}


def pick_image(targets: Iterable[Target], device: Device) -> Choice:
    """The image the driver picks for ``device`` among ``targets``."""
    targets = list(targets)

    def key(t: Target) -> tuple[int, int]:
        return (t.number, _SPECIFICITY[t.variant])

    sass = [t for t in targets if t.kind is Kind.SASS and _sass_runs_on(t, device)]
    if sass:
        return Choice(device, ImageKind.SASS, max(sass, key=key))
    ptx = [t for t in targets if t.kind is Kind.PTX and _ptx_runs_on(t, device)]
    if ptx:
        return Choice(device, ImageKind.PTX_JIT, max(ptx, key=key))
    return Choice(device, ImageKind.NONE, None)


_RANK = {ImageKind.NONE: 0, ImageKind.PTX_JIT: 1, ImageKind.SASS: 2}


def pick_worst(units: Iterable[ArchList], device: Device) -> Choice:
    """The image of the translation unit that fares worst on ``device``: the runtime loads each
    unit's fatbin on its own, so one unit without an image fails that unit's kernels."""
    choices = [pick_image(u, device) for u in units]
    return min(choices, key=lambda c: _RANK[c.kind], default=Choice(device, ImageKind.NONE, None))


def stub_risk(choice: Choice) -> bool:
    """A JIT from PTX below the device: code sees the PTX's ``__CUDA_ARCH__``, so a path gated
    above it is compiled out and its kernel runs and does nothing (measured: sm_80 PTX on sm_90
    ran the ``-1`` fallback of a ``>= 900`` gate)."""
    target = choice.target
    return choice.kind is ImageKind.PTX_JIT and target is not None and target.number < choice.device.number


def explain(archs: ArchList | Iterable[Target], devices: Iterable[Device] = KNOWN_DEVICES) -> list[Choice]:
    """The driver's choice for every device."""
    targets = list(archs)
    return [pick_image(targets, d) for d in devices]


def claimed_devices(archs: ArchList, devices: Iterable[Device] = KNOWN_DEVICES) -> list[Device]:
    """Devices a list claims to support: at or above its lowest arch."""
    lowest = archs.lowest
    return [d for d in devices if lowest is not None and d.number >= lowest.number]
