"""The arch model: parse, normalise, render and validate GPU arch lists.

Maintainers write lists the way ``TORCH_CUDA_ARCH_LIST`` takes them (``7.5;8.0;9.0+PTX``,
``8.0 8.6 9.0a 12.0+PTX``); builds, binaries and the driver speak in targets (``sm_90a``,
``compute_90``). An :class:`ArchList` is a frozen set of :class:`Target` with one canonical string,
and renders for every build system farm drives.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from farm.errors import ArchError


class Kind(enum.Enum):
    """SASS runs as is on matching devices; PTX is JIT-compiled forward by the driver."""

    SASS = "sass"
    PTX = "ptx"


class Variant(str, enum.Enum):
    """``a``: arch-specific (runs on exactly that arch); ``f``: family-specific (same major)."""

    NONE = ""
    ARCH = "a"
    FAMILY = "f"


# compiled on first use (re caches them): reading a binary's targets parses no list
_ITEM = r"(?i)^(?P<major>\d{1,2})\.(?P<minor>\d)(?P<variant>[af]?)(?P<ptx>\+PTX)?$"
_NAME = r"^(?P<prefix>sm|compute)_(?P<num>\d{2,3})(?P<variant>[af]?)$"
_SEPARATORS = r"[;\s]+"

# torch's named arches (torch/utils/cpp_extension.py; docs/background.md, "torch's TORCH_CUDA_ARCH_LIST").
NAMED_ARCHES: dict[str, str] = {
    "kepler+tesla": "3.7",
    "kepler": "3.5+PTX",
    "maxwell+tegra": "5.3",
    "maxwell": "5.0;5.2+PTX",
    "pascal": "6.0;6.1+PTX",
    "volta+tegra": "7.2",
    "volta": "7.0+PTX",
    "turing": "7.5+PTX",
    "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX",
    "ada": "8.9+PTX",
    "hopper": "9.0+PTX",
    "blackwell+tegra": "11.0",
    "blackwell": "10.0;10.3;12.0;12.1+PTX",
}

# The items torch's TORCH_CUDA_ARCH_LIST accepts, each optionally with ``+PTX``
# (``supported_arches`` in torch/utils/cpp_extension.py, 2.13). Anything else, e.g.
# 8.8 or 10.1 that nvcc builds, makes torch raise "Unknown CUDA arch" mid-build.
TORCH_ARCHES: frozenset[tuple[int, int, str]] = frozenset(
    {(3, 5, ""), (3, 7, ""), (5, 0, ""), (5, 2, ""), (5, 3, ""), (6, 0, ""), (6, 1, ""), (6, 2, ""),
     (7, 0, ""), (7, 2, ""), (7, 5, ""), (8, 0, ""), (8, 6, ""), (8, 7, ""), (8, 9, ""), (9, 0, ""),
     (9, 0, "a"), (10, 0, ""), (10, 0, "a"), (11, 0, ""), (11, 0, "a"), (10, 3, ""), (10, 3, "a"),
     (12, 0, ""), (12, 0, "a"), (12, 1, ""), (12, 1, "a")}
)


@dataclass(frozen=True, slots=True)
class Target:
    """One image a fatbin can hold: SASS ``sm_90a`` or PTX ``compute_90``."""

    major: int
    minor: int
    variant: Variant = Variant.NONE
    kind: Kind = Kind.SASS

    @property
    def number(self) -> int:
        """The arch as nvcc numbers it: 9.0 -> 90, 12.0 -> 120."""
        return self.major * 10 + self.minor

    @property
    def cuda_arch(self) -> int:
        """The value of ``__CUDA_ARCH__`` in code compiled for this image."""
        return self.number * 10

    @property
    def name(self) -> str:
        prefix = "sm" if self.kind is Kind.SASS else "compute"
        return f"{prefix}_{self.number}{self.variant.value}"

    @property
    def version(self) -> str:
        """``9.0a`` style, without the kind."""
        return f"{self.major}.{self.minor}{self.variant.value}"

    def with_kind(self, kind: Kind) -> Target:
        return Target(self.major, self.minor, self.variant, kind)

    def without_variant(self) -> Target:
        return Target(self.major, self.minor, Variant.NONE, self.kind)

    @classmethod
    def from_name(cls, name: str) -> Target:
        """Parse ``sm_90a`` / ``compute_100f``."""
        m = re.match(_NAME, name.strip())
        if not m:
            raise ArchError(f"{name!r} is not an arch target name", hint="write it like sm_90a or compute_90")
        num = int(m["num"])
        kind = Kind.SASS if m["prefix"] == "sm" else Kind.PTX
        return cls(num // 10, num % 10, Variant(m["variant"]), kind)

    def sort_key(self) -> tuple[int, str, int]:
        return (self.number, self.variant.value, 0 if self.kind is Kind.SASS else 1)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Target({self.name!r})"


def _sorted(targets: Iterable[Target]) -> tuple[Target, ...]:
    return tuple(sorted(set(targets), key=Target.sort_key))


@dataclass(frozen=True, slots=True)
class ArchList:
    """A normalised arch list: a set of targets with one canonical string."""

    targets: frozenset[Target]

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, *, where: str | None = None) -> ArchList:
        """Parse every form maintainers write.

        Items are separated by ``;`` and/or whitespace. Each item is ``MAJOR.MINOR`` with an
        optional ``a``/``f`` suffix and an optional ``+PTX``, a torch arch name (``Hopper``),
        or a target name (``sm_90a``, ``compute_90``), so the canonical string parses back.
        """
        if not isinstance(text, str):
            raise ArchError(f"an arch list must be a string, got {type(text).__name__}", where=where)
        items = [item for item in re.split(_SEPARATORS, text.strip()) if item]
        if not items:
            raise ArchError(
                "empty arch list", where=where, hint="write the arches, e.g. '8.0;8.6;9.0+PTX'"
            )
        return cls(frozenset(t for item in items for t in _parse_item(item, where)))

    @classmethod
    def of(cls, targets: Iterable[Target]) -> ArchList:
        return cls(frozenset(targets))

    # -- views ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Target]:
        return iter(_sorted(self.targets))

    def __len__(self) -> int:
        return len(self.targets)

    def __bool__(self) -> bool:
        return bool(self.targets)

    def __or__(self, other: ArchList) -> ArchList:
        return ArchList(self.targets | other.targets)

    def __sub__(self, other: ArchList) -> ArchList:
        return ArchList(self.targets - other.targets)

    @property
    def sass(self) -> tuple[Target, ...]:
        return tuple(t for t in self if t.kind is Kind.SASS)

    @property
    def ptx(self) -> tuple[Target, ...]:
        return tuple(t for t in self if t.kind is Kind.PTX)

    @property
    def lowest(self) -> Target | None:
        return min(self.targets, key=Target.sort_key, default=None)

    def canonical(self) -> str:
        """The one canonical string: target names sorted by arch, SASS before PTX."""
        return ";".join(t.name for t in self)

    def __str__(self) -> str:
        return self.canonical()

    def __repr__(self) -> str:
        return f"ArchList({self.canonical()!r})"

    def names(self) -> list[str]:
        return [t.name for t in self]

    # -- rendering --------------------------------------------------------------------------
    def _groups(self) -> list[tuple[int, int, Variant, bool, bool]]:
        """(major, minor, variant, has_sass, has_ptx) per arch, in order."""
        groups: dict[tuple[int, int, Variant], list[bool]] = {}
        for t in self:
            flags = groups.setdefault((t.major, t.minor, t.variant), [False, False])
            flags[0 if t.kind is Kind.SASS else 1] = True
        return [(ma, mi, v, s, p) for (ma, mi, v), (s, p) in groups.items()]

    def to_list_syntax(self) -> str:
        """``7.5;8.0;9.0+PTX`` form; PTX-only targets cannot be written in it."""
        items = []
        for major, minor, variant, has_sass, has_ptx in self._groups():
            if not has_sass:
                raise ArchError(
                    f"compute_{major}{minor}{variant.value} without sm_{major}{minor}{variant.value} "
                    "cannot be written as a TORCH_CUDA_ARCH_LIST item",
                    hint="add the SASS target or use the CMake/nvcc rendering",
                )
            items.append(f"{major}.{minor}{variant.value}" + ("+PTX" if has_ptx else ""))
        return ";".join(items)

    def render_torch(self) -> str:
        """The value for ``TORCH_CUDA_ARCH_LIST``; torch rejects ``f`` and most ``a`` arches."""
        for t in self:
            if t.variant is Variant.FAMILY:
                raise ArchError(
                    f"torch's TORCH_CUDA_ARCH_LIST rejects family targets ({t.name})",
                    hint="use 'a' or plain arches for torch extensions, or pass -gencode via the recipe",
                )
            if (t.major, t.minor, t.variant.value) not in TORCH_ARCHES:
                raise ArchError(
                    f"torch's TORCH_CUDA_ARCH_LIST does not accept {t.version} ({t.name}): "
                    "torch raises 'Unknown CUDA arch' for it",
                    hint="torch builds what it knows (7.5 ... 12.1, 'a' only on 9.0/10.0/10.3/11.0/12.0/12.1); "
                         "pass -gencode via the recipe's nvcc flags for other arches",
                )
        return self.to_list_syntax()

    def render_cmake(self) -> str:
        """The value for ``CMAKE_CUDA_ARCHITECTURES`` / ``CUDAARCHS``: ``80-real;90``."""
        return ";".join(f"{major}{minor}{variant.value}" + ("" if sass and ptx else "-real" if sass else "-virtual")
                        for major, minor, variant, sass, ptx in self._groups())

    def render_nvcc(self) -> tuple[str, ...]:
        """nvcc's flags for the list, one ``-gencode`` per target: ``-gencode=arch=compute_80,code=sm_80``,
        a PTX target as ``code=compute_90``."""
        return tuple(f"-gencode=arch=compute_{t.number}{t.variant.value},code={t.name}" for t in _sorted(self.targets))


def _parse_item(item: str, where: str | None) -> set[Target]:
    named = NAMED_ARCHES.get(item.lower())
    if named is not None:
        return set(ArchList.parse(named, where=where).targets)
    m = re.match(_ITEM, item)
    if m:
        major, minor = int(m["major"]), int(m["minor"])
        variant = Variant(m["variant"].lower())
        sass = Target(major, minor, variant, Kind.SASS)
        _check_known(sass, item, where)
        return {sass, sass.with_kind(Kind.PTX)} if m["ptx"] else {sass}
    if re.match(_NAME, item):
        target = Target.from_name(item)
        _check_known(target, item, where)
        return {target}
    raise ArchError(
        f"{item!r} is not an arch",
        where=where,
        hint="write MAJOR.MINOR with optional a/f and +PTX (e.g. 9.0a, 12.0+PTX), or sm_90a / compute_90",
    )


# Every compute capability an nvcc has known (Kepler on); anything else is a typo, not an arch.
EVER_KNOWN = frozenset({30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101,
                        103, 110, 120, 121})


def _check_known(target: Target, item: str, where: str | None) -> None:
    if target.number not in EVER_KNOWN:
        known = ", ".join(f"{n // 10}.{n % 10}" for n in sorted(EVER_KNOWN))
        raise ArchError(f"{item!r} is not a GPU arch any nvcc knows", where=where, hint=f"known arches: {known}")


class Rendering(str, enum.Enum):
    """How a package that reads the list from its own variable wants it (recipe ``build.arch_env``)."""

    TORCH = "torch"  # 8.0;9.0a;12.0+PTX (TORCH_CUDA_ARCH_LIST)
    CMAKE = "cmake"  # 80-real;90a-real;120 (CMAKE_CUDA_ARCHITECTURES)
    VERSIONS = "versions"  # 8.0;9.0;12.0: SASS arches, suffixes dropped (NATTEN_CUDA_ARCH)
    NUMBERS = "numbers"  # 80;90;120: SASS arches, suffixes dropped (FLASH_ATTN_CUDA_ARCHS)


def render(archs: ArchList, how: Rendering) -> str:
    if how is Rendering.TORCH:
        return archs.render_torch()
    if how is Rendering.CMAKE:
        return archs.render_cmake()
    if archs.ptx:
        raise ArchError(
            f"the {how.value} rendering names SASS arches only; {' '.join(t.name for t in archs.ptx)} cannot be passed",
            hint="drop +PTX from the list (the package builds no PTX through this variable), or use torch/cmake",
        )
    arches = sorted({(t.major, t.minor) for t in archs.sass})
    if how is Rendering.VERSIONS:
        return ";".join(f"{a}.{b}" for a, b in arches)
    return ";".join(f"{a}{b}" for a, b in arches)


# --------------------------------------------------------------------------------------------
# What each CUDA line's nvcc can build (docs/background.md, "nvcc"). Measured: the --gpu-name values of ptxas from
# nvidia-cuda-nvcc-cu12 12.4.131, 12.6.85, 12.8.93, 12.9.86 (those wheels hold no nvcc), and
# nvcc --dryrun -gencode of 13.0.88 and 13.2.86 (tests/test_arch.py re-checks the suite's nvcc).
# --------------------------------------------------------------------------------------------
_CUDA12_BASE = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90)


def _spec(real: Iterable[int], arch_specific: Iterable[int], family: Iterable[int]) -> frozenset[tuple[int, str]]:
    return frozenset({(n, "") for n in real} | {(n, "a") for n in arch_specific} | {(n, "f") for n in family})


_CUDA13 = _spec(
    (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121),
    (90, 100, 103, 110, 120, 121),
    (100, 103, 110, 120, 121),
)
_SUPPORT: dict[str, frozenset[tuple[int, str]]] = {
    "12.4": _spec(_CUDA12_BASE, (90,), ()),
    "12.6": _spec(_CUDA12_BASE, (90,), ()),
    "12.8": _spec((*_CUDA12_BASE, 100, 101, 120), (90, 100, 101, 120), ()),
    "12.9": _spec(
        (*_CUDA12_BASE, 100, 101, 103, 120, 121),
        (90, 100, 101, 103, 120, 121),
        (100, 101, 103, 120, 121),
    ),
    "13.0": _CUDA13,
    "13.2": _CUDA13,  # the same targets as 13.0
}

KNOWN_CUDA_LINES: tuple[str, ...] = tuple(_SUPPORT)


def supported_targets(cuda: str) -> frozenset[tuple[int, str]]:
    """(arch number, variant) pairs that CUDA line ``cuda``'s nvcc accepts."""
    try:
        return _SUPPORT[cuda]
    except KeyError:
        raise ArchError(
            f"farm has no nvcc support table for CUDA {cuda}",
            hint=f"known CUDA lines: {', '.join(KNOWN_CUDA_LINES)}; add the line to farm/arch.py",
        ) from None


def unsupported(archs: ArchList, cuda: str) -> list[Target]:
    """Targets of ``archs`` that CUDA line ``cuda`` cannot build."""
    table = supported_targets(cuda)
    return [t for t in archs if (t.number, t.variant.value) not in table]


def validate_for_cuda(archs: ArchList, cuda: str, *, where: str | None = None) -> None:
    """Raise :class:`ArchError` naming every target ``cuda``'s nvcc cannot build."""
    bad = unsupported(archs, cuda)
    if not bad:
        return
    table = supported_targets(cuda)
    lowest = min(n for n, _ in table)
    notes = []
    if any(t.number < lowest for t in bad):
        notes.append(f"CUDA {cuda} starts at sm_{lowest}")
    if any(t.number == 101 for t in bad) and (110, "") in table:
        notes.append("sm_101 became sm_110 in CUDA 13.0")
    if any(t.variant is Variant.FAMILY for t in bad):
        notes.append("family ('f') targets need CUDA 12.9+")
    detail = f" ({'; '.join(notes)})" if notes else ""
    raise ArchError(
        f"CUDA {cuda}'s nvcc cannot build {', '.join(t.name for t in bad)}{detail}",
        where=where,
        hint="drop those arches for this CUDA line with a per-CUDA override, or restrict the package's CUDA lines",
    )
