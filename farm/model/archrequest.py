"""A cell's arch request: the one resolution of what a cell's build must target.

:func:`arch_request` is the only caller of :func:`~farm.model.cells.resolve_arch`: the matrix
resolves a cell once, the planner and the builder carry what it resolved, and postbuild asserts
exactly that (cibuildwheel's way: options are resolved once into a frozen per-build object and
passed down). Where a wheel is compared with what *today's* config says (the publish gate,
audit), the comparison is the point, and it goes through this same function.

The request crosses a process boundary as JSON (:meth:`ArchRequest.to_json` /
:meth:`ArchRequest.from_json`, validated on read), inside the build spec
(:mod:`farm.builder.spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from farm.errors import ArchError, UsageError
from farm.model.arch import ArchList
from farm.model.cells import Cell, extension_lists, resolve_arch
from farm.model.config import FarmConfig, Recipe

GIVEN = "given"  # the origin of a list a caller passes in rather than the config resolves


@dataclass(frozen=True)
class ArchRequest:
    """A cell's arch list, as written and normalised, the rule it came from, and the recipe's
    per-extension lists for the cell's CUDA line (packages that build one module per arch)."""

    archs: ArchList
    requested: str  # the list as written in the config (provenance's "requested")
    origin: str  # e.g. "recipe arch.by_cuda['12.8']" or "policy x86_64 12.8"
    extensions: tuple[tuple[str, ArchList], ...] = ()  # glob -> list
    where: str = ""  # where the list was written (file and line), for messages

    @classmethod
    def given(cls, archs: ArchList, requested: str | None = None, origin: str | None = None,
              extensions: tuple[tuple[str, ArchList], ...] = ()) -> ArchRequest:
        """A list the caller decided (a test, an explicit override): nothing is resolved."""
        return cls(archs, requested or archs.canonical(), origin or GIVEN, extensions)

    def to_json(self) -> dict[str, object]:
        return {
            "normalised": self.archs.canonical(),
            "requested": self.requested,
            "origin": self.origin,
            "extensions": [[glob, archs.canonical()] for glob, archs in self.extensions],
            "where": self.where,
        }

    @classmethod
    def from_json(cls, data: object, *, where: str) -> ArchRequest:
        """The request :meth:`to_json` wrote; anything else is a :class:`UsageError` naming ``where``."""
        if not isinstance(data, Mapping):
            raise _bad(where, "arch", "an object")
        for key in ("normalised", "requested", "origin", "where"):
            if not isinstance(data.get(key), str):
                raise _bad(where, f"arch.{key}", "a string")
        extensions = data.get("extensions", [])
        if not isinstance(extensions, list) or not all(
                isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e) for e in extensions):
            raise _bad(where, "arch.extensions", "a list of [glob, arch list] pairs")
        # "" is a host-only extension (the recipe's `none`): it must hold no device code
        per_extension = tuple((glob, ArchList(frozenset()) if text == ""
                               else canonical_arch_list(text, where, f"arch.extensions[{glob!r}]"))
                              for glob, text in extensions)
        return cls(canonical_arch_list(data["normalised"], where, "arch.normalised"), data["requested"],
                   data["origin"], per_extension, data["where"])


def _bad(where: str, key: str, what: str) -> UsageError:
    return UsageError(f"{key} must be {what}", where=where,
                      hint="write the spec with farm build (it is the build's record), do not edit it")


def canonical_arch_list(text: str, where: str, key: str) -> ArchList:
    """A list farm wrote (canonical); anything else is a :class:`UsageError` naming ``key``."""
    try:
        archs = ArchList.parse(text, where=where)
    except ArchError as exc:
        raise UsageError(f"{key}: {exc.message}", where=where) from None
    if archs.canonical() != text:  # written canonical: another spelling was not written by farm
        raise _bad(where, key, f"a canonical arch list ({archs.canonical()!r})")
    return archs


def arch_request(config: FarmConfig, recipe: Recipe, cell: Cell) -> ArchRequest | None:
    """The cell's arch request (:func:`~farm.model.cells.resolve_arch`'s list), with the
    recipe's per-extension lists of its CUDA line; None where the platform has no policy row for
    the CUDA line (the farm builds no such cell)."""
    resolution = resolve_arch(config, recipe, cell)
    if resolution is None:
        return None
    return ArchRequest(resolution.archs, resolution.spec.text, resolution.origin,
                       extension_lists(recipe, cell.cuda), resolution.spec.where)


def require_arch_request(config: FarmConfig, recipe: Recipe, cell: Cell) -> ArchRequest:
    """:func:`arch_request`, where a cell without a policy row is bad input."""
    request = arch_request(config, recipe, cell)
    if request is None:
        raise UsageError(f"no arch policy for cell {cell.id}", where=config.defaults.path.name,
                         hint="add a policy row for this CUDA line and platform, or an arch override to the recipe")
    return request
