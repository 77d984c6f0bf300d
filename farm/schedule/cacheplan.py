"""The Actions cache plan: what the builds' cache keys weigh against GitHub's 10 GB (pure).

Two kinds of key: an assembled CUDA toolkit per (CUDA line, platform, component set), and torch
with its CUDA libraries per (platform, CUDA line, torch), which the Pythons of a row share (the
first job to save the key stores one torch wheel and what it pins). A key's size is the sum of
the wheels or archives it is made from, as downloaded.

The sizes are facts measured from a package index (PEP 691 JSON pages, PEP 700 ``size``) and
kept in ``cache_sizes.json`` beside this module with the day they were measured; ``farm
cache-plan --measure`` measures them again (:mod:`farm.commands.cache_plan`). Where no index this
side can answer (PyTorch's own per-line index, NVIDIA's redist archives), a key's size is an
estimate, said so with its basis: the same component or the same torch measured elsewhere, else
a constant. Nothing here does I/O; :class:`CellKeys` names a planned cell's keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.builder.spec import knobs
from farm.errors import UsageError
from farm.model.cells import NO_TORCH
from farm.model.config import FarmConfig
from farm.schedule.matrix import PlannedCell
from farm.toolkit.request import request_for

DATA = Path(__file__).with_name("cache_sizes.json")
CACHE_LIMIT_BYTES = 10 * 10**9  # GitHub: 10 GB per repository, least recently used evicted
# Where nothing was measured: a toolkit component's download, and a CUDA torch with its libraries
# (PyTorch's Windows CUDA wheels are ~2.5-3.5 GB; PyPI's Linux ones with their nvidia-* wheels the same).
ESTIMATE_COMPONENT_BYTES = 100 * 10**6
ESTIMATE_TORCH_BYTES = 3 * 10**9


@dataclass(frozen=True)
class TorchSize:
    """PyPI's torch ``wheel`` for (``platform``, ``torch``): its CUDA line (None: a CPU build) and
    the bytes of the wheel plus every wheel its requirements pin for that platform."""

    platform: str
    torch: str
    cuda: str | None
    wheel: str
    bytes: int
    requirements: Mapping[str, int]  # "nvidia-cublas-cu12==12.8.4.1" -> bytes of its wheel


@dataclass(frozen=True)
class ComponentSize:
    """The wheel a toolkit component of a CUDA line is assembled from, on one platform."""

    cuda: str
    platform: str
    component: str
    wheel: str
    bytes: int


@dataclass(frozen=True)
class CacheSizes:
    measured_on: str  # the day of the measurement, YYYY-MM-DD
    index: str  # the index measured
    torch: tuple[TorchSize, ...]
    toolkit: tuple[ComponentSize, ...]
    not_measured: tuple[str, ...] = ()  # what could not be, and why

    def to_json(self) -> dict[str, Any]:
        return {
            "about": "Sizes of what the Actions cache keys hold, measured from a package index's PEP 691 "
                     "pages (PEP 700 size). Regenerate: farm cache-plan --measure.",
            "measured_on": self.measured_on, "index": self.index,
            "not_measured": list(self.not_measured),
            "torch": [{"platform": t.platform, "torch": t.torch, "cuda": t.cuda, "wheel": t.wheel, "bytes": t.bytes,
                       "requirements": dict(sorted(t.requirements.items()))} for t in self.torch],
            "toolkit": [{"cuda": c.cuda, "platform": c.platform, "component": c.component, "wheel": c.wheel,
                         "bytes": c.bytes} for c in self.toolkit],
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> CacheSizes:
        try:
            return cls(
                str(data["measured_on"]), str(data["index"]),
                tuple(TorchSize(str(t["platform"]), str(t["torch"]), None if t["cuda"] is None else str(t["cuda"]),
                                str(t["wheel"]), _count(t["bytes"]),
                                {str(k): _count(v) for k, v in t["requirements"].items()})
                      for t in data["torch"]),
                tuple(ComponentSize(str(c["cuda"]), str(c["platform"]), str(c["component"]), str(c["wheel"]),
                                    _count(c["bytes"])) for c in data["toolkit"]),
                tuple(str(n) for n in data.get("not_measured") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: not a cache-size table ({type(exc).__name__}: {exc})",
                             hint="regenerate it: farm cache-plan --measure") from None


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a byte count")
    return value


@dataclass(frozen=True, order=True)
class ToolkitKey:
    cuda: str
    platform: str
    components: tuple[str, ...]


@dataclass(frozen=True, order=True)
class TorchKey:
    platform: str
    cuda: str
    torch: str


class CellKeys:
    """The keys a cell's build job restores, as ``farm build`` requests them: its toolkit (CUDA
    line, platform, component set: torch's components when it links torch, the recipe's extra
    ones) and, when it links torch, torch's (platform, CUDA line, torch)."""

    def __init__(self, config: FarmConfig) -> None:
        self.config = config
        self._extra: dict[str, tuple[str, ...]] = {}

    def of(self, planned: PlannedCell) -> tuple[ToolkitKey, TorchKey | None]:
        cell = planned.cell
        extra = self._extra.get(cell.package)
        if extra is None:
            extra = self._extra[cell.package] = tuple(
                knobs(self.config, self.config.recipe(cell.package)).extra_cuda_components)
        linked = cell.torch != NO_TORCH
        request = request_for(self.config.defaults.toolkit, cell.cuda, torch=linked, extra=extra,
                              platform=cell.platform, env={})
        torch = TorchKey(cell.platform, cell.cuda, planned.torch_version) if linked and planned.torch_version else None
        return ToolkitKey(cell.cuda, cell.platform, tuple(sorted(request.components))), torch


@dataclass(frozen=True)
class KeySize:
    bytes: int
    measured: bool
    basis: str  # where the number comes from


def toolkit_size(key: ToolkitKey, sizes: CacheSizes) -> KeySize:
    """The sum of the key's components: each measured for its line and platform, else the same
    component's largest measurement on another line or platform, else a constant."""
    exact = {(c.cuda, c.platform, c.component): c.bytes for c in sizes.toolkit}
    elsewhere: dict[str, int] = {}
    for c in sizes.toolkit:
        elsewhere[c.component] = max(elsewhere.get(c.component, 0), c.bytes)
    total, missing = 0, []
    for name in key.components:
        got = exact.get((key.cuda, key.platform, name))
        if got is None:
            missing.append(name)
            got = elsewhere.get(name, ESTIMATE_COMPONENT_BYTES)
        total += got
    if not missing:
        return KeySize(total, True, f"measured ({sizes.measured_on})")
    return KeySize(total, False, f"estimated: {', '.join(missing)} not measured for CUDA {key.cuda} {key.platform}")


def torch_size(key: TorchKey, sizes: CacheSizes) -> KeySize:
    """PyPI's build of the key's torch when it is the key's CUDA line (measured); another line's
    PyPI build of the same torch and platform (an estimate: the libraries differ by line); else
    a constant."""
    found = [t for t in sizes.torch if t.platform == key.platform and t.torch == key.torch and t.cuda is not None]
    for t in found:
        if t.cuda == key.cuda:
            return KeySize(t.bytes, True, f"measured: {t.wheel} and its pins ({sizes.measured_on})")
    if found:
        return KeySize(found[0].bytes, False, f"estimated from PyPI's CUDA {found[0].cuda} build of torch {key.torch}")
    return KeySize(ESTIMATE_TORCH_BYTES, False, "estimated: no CUDA build of this torch was measured on "
                                                 f"{key.platform}")


@dataclass(frozen=True)
class PlanRow:
    what: str
    keys: int
    measured: int  # keys whose size is measured
    total_bytes: int
    smallest: int
    largest: int


@dataclass(frozen=True)
class CachePlan:
    rows: tuple[PlanRow, ...]
    limit_bytes: int = CACHE_LIMIT_BYTES

    @property
    def total_bytes(self) -> int:
        return sum(r.total_bytes for r in self.rows)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.limit_bytes


def _row(what: str, sized: list[KeySize]) -> PlanRow:
    values = [s.bytes for s in sized]
    return PlanRow(what, len(sized), sum(s.measured for s in sized), sum(values), min(values, default=0),
                   max(values, default=0))


def cache_plan(toolkit_keys: Iterable[ToolkitKey], torch_keys: Iterable[TorchKey], sizes: CacheSizes,
               *, limit_bytes: int = CACHE_LIMIT_BYTES) -> CachePlan:
    """Every distinct key's size, per kind, against ``limit_bytes``."""
    return CachePlan((
        _row("the assembled CUDA toolkit, per (CUDA line, platform, component set)",
             [toolkit_size(k, sizes) for k in sorted(set(toolkit_keys))]),
        _row("torch and its CUDA libraries, per (platform, CUDA line, torch)",
             [torch_size(k, sizes) for k in sorted(set(torch_keys))]),
    ), limit_bytes)
