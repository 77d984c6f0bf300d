"""The arch rule: what each extension of a wheel must hold, and how what it holds differs.

One relation, asked at three places with their own expectations: the post-build assertion
(:mod:`farm.binary.assertion`) holds the binaries to the cell's :class:`Expected`; the upload gate
and ``farm audit`` (:mod:`farm.provenance.judge`) hold a provenance's recorded lists to each
other and to what today's configuration expects. An extension built from kernel families must
hold their targets, plus its own list for its translation units outside every family
(:func:`expected_list`); what it holds differs from that by the targets it lacks and the ones it
has beyond (:func:`difference`). A change to the rule is made here, once, and all three follow.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import PurePosixPath

from farm.binary.tusources import source_stem
from farm.model.arch import ArchList
from farm.model.config import Recipe

NONE = ArchList(frozenset())


@dataclass(frozen=True, slots=True)
class Difference:
    """What a binary (an extension, a translation unit, a bundled library) lacks of what it
    must hold, and what it holds beyond it."""

    missing: ArchList
    extra: ArchList

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra)


def difference(expected: ArchList, found: ArchList) -> Difference:
    return Difference(expected - found, found - expected)


def expected_list(own: ArchList, families: ArchList | None = None, *, outside: bool = True) -> ArchList:
    """What an extension must hold: the targets of the kernel families with a translation unit
    in it (``None``: none), plus its own list when it has translation units outside every family."""
    return (families or NONE) | (own if outside else NONE)


def fits(recorded: ArchList, own: ArchList, families: ArchList | None) -> bool:
    """Whether a recorded expected list is one the rule gives an extension with this own list and
    these families' targets. A record does not say whether the extension has translation units
    outside its families, so with families both answers fit."""
    if families is None:
        return recorded == own
    return recorded in (expected_list(own, families, outside=False), expected_list(own, families))


@dataclass(frozen=True)
class VendoredRule:
    """The recipe's expectation for bundled libraries matching ``glob`` (``*.libs/`` members):
    their own arch list (empty: host-only), or ``archs`` None and the reason they are exempt."""

    glob: str
    archs: ArchList | None
    exempt: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"glob": self.glob, "archs": self.archs.canonical() if self.archs is not None else None,
                "exempt": self.exempt}


@dataclass(frozen=True)
class FamilyTargets:
    """A kernel family as built for one cell: its ``.cu`` sources (paths from the source root),
    the globs of the sources the build generates (``file(GLOB)`` in its SRCS, from the source
    root), and the exact targets their translation units must hold (empty: the family is not built)."""

    name: str
    sources: tuple[str, ...]
    targets: ArchList
    patterns: tuple[str, ...] = ()

    @property
    def stems(self) -> frozenset[str]:
        return frozenset(source_stem(s) for s in self.sources)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "sources": list(self.sources), "patterns": list(self.patterns),
                "targets": self.targets.canonical()}


def vendored_rules(recipe: Recipe) -> tuple[VendoredRule, ...]:
    """The recipe's ``vendored`` map as the assertion's rules."""
    return tuple(VendoredRule(v.glob, v.archs, v.exempt) for v in recipe.vendored)


def unit_owners(unit: str, families: tuple[FamilyTargets, ...], *,
                globs: bool = True) -> list[tuple[str, ArchList, tuple[str, ...]]]:
    """The sources a TU with this source stem can come from: (source or glob, its targets, the
    families naming it). One source in several families gets all of their targets, as CMake's
    flags add up. The binary names a TU by its file name only, so a family's own file of that
    name wins over a glob, and a glob that spells out part of the name (vLLM's
    ``sm80_kernel_*_float16.cu``) over one that names any file (a folder's ``*.cu``); several
    left with different targets cannot be told apart. ``globs`` False: own files only."""
    named: dict[str, list[FamilyTargets]] = {}
    for family in families:
        for path in family.sources:
            if source_stem(path) == unit:
                named.setdefault(path, []).append(family)
    if not named and globs:
        matched: dict[str, list[FamilyTargets]] = {}
        for family in families:
            for pattern in family.patterns:
                if fnmatch.fnmatchcase(unit, source_stem(pattern)):
                    matched.setdefault(pattern, []).append(family)
        spelled = {p: found for p, found in matched.items() if source_stem(p).strip("*")}
        named = spelled or matched
    return [(key, ArchList.of(t for f in found for t in f.targets.targets), tuple(f.name for f in found))
            for key, found in named.items()]


def _match(archive_path: str, glob: str) -> bool:
    return fnmatch.fnmatchcase(archive_path, glob) or fnmatch.fnmatchcase(PurePosixPath(archive_path).name, glob)


@dataclass(frozen=True)
class Expected:
    """What a wheel's extensions must hold.

    ``per_extension`` maps fnmatch globs (matched against the archive path, then the basename) to
    their own list, first match wins (a module built with its own flags: ``*_sm90*.so -> 9.0a``). An empty
    ``ArchList`` there means "host-only by design".
    """

    default: ArchList
    per_extension: tuple[tuple[str, ArchList], ...] = ()
    allow_no_extensions: bool = False
    cuda_package: bool = True
    default_from: str = "the cell's arch list"  # what the default list is, for the report
    vendored: tuple[VendoredRule, ...] = ()  # bundled libraries: first matching rule wins
    cuda: str | None = None  # the cell's CUDA line ("13.0"): the toolkit the device code must record
    # kernel families: TUs compiled from a family's sources must hold exactly its targets; the
    # other TUs are judged against the extension's list
    families: tuple[FamilyTargets, ...] = ()

    def for_vendored(self, archive_path: str) -> VendoredRule | None:
        return next((r for r in self.vendored if _match(archive_path, r.glob)), None)

    def for_extension(self, archive_path: str) -> tuple[ArchList, str | None]:
        """The expected list for one extension and the glob that chose it (``None``: the default)."""
        return next(((archs, glob) for glob, archs in self.per_extension if _match(archive_path, glob)),
                    (self.default, None))

    def to_json(self) -> dict[str, object]:
        return {
            "default": self.default.canonical(),
            "per_extension": {glob: archs.canonical() for glob, archs in self.per_extension},
            "allow_no_extensions": self.allow_no_extensions,
            "cuda_package": self.cuda_package,
            "vendored": [r.to_json() for r in self.vendored],
            "families": [f.to_json() for f in self.families],
        }
