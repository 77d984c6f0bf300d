"""Each recipe's cold build time as measured on the reference host (``recipe_times.json``).

A row is one cell's whole ``farm build`` (the build environment, the compile, repair, assertion,
stamp and import check) on the host ``docs/recipe-status.md`` was recorded on, with its basis:
``measured`` (a whole build), ``probe`` (the first translation unit's time times the package's
units, ``farm build --probe``) or ``estimate`` (neither: a fork of a measured recipe, or a guess
with its reason). nvcc compiles every unit once per target, so a cell whose arch list has another
number of targets than the measured cell's is scaled by it (:meth:`RecipeTimes.seconds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm.errors import UsageError
from farm.jsonread import JsonInputError, load_file

DATA = Path(__file__).with_name("recipe_times.json")
BASES = ("measured", "probe", "estimate")


@dataclass(frozen=True)
class RecipeTime:
    seconds: float  # one cell's cold build on the reference host
    targets: int | None  # the measured cell's targets; None: not scaled by the cell's list
    basis: str  # measured | probe | estimate
    note: str


@dataclass(frozen=True)
class RecipeTimes:
    host: str
    measured_on: str
    recipes: Mapping[str, RecipeTime]

    def seconds(self, package: str, targets: int) -> float | None:
        """A cell's cold build on the reference host for an arch list of ``targets`` targets, or
        None when the table has no row for the recipe."""
        row = self.recipes.get(package)
        if row is None:
            return None
        if row.targets is None or targets < 1:
            return row.seconds
        return row.seconds * targets / row.targets

    @classmethod
    def from_json(cls, data: Any, where: str) -> RecipeTimes:
        try:
            recipes = {}
            for name, row in data["recipes"].items():
                seconds, targets, basis = row["seconds"], row["targets"], row["basis"]
                if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds <= 0:
                    raise ValueError(f"{name}: seconds must be a positive number")
                if targets is not None and (not isinstance(targets, int) or targets < 1):
                    raise ValueError(f"{name}: targets must be a positive integer or null")
                if basis not in BASES:
                    raise ValueError(f"{name}: basis must be one of {', '.join(BASES)}")
                recipes[str(name)] = RecipeTime(float(seconds), targets, basis, str(row.get("note", "")))
            return cls(str(data["host"]), str(data["measured_on"]), recipes)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: not a recipe time table ({type(exc).__name__}: {exc})",
                             hint='each recipe: {"seconds", "targets", "basis", "note"}') from None

    @classmethod
    def load(cls, path: Path = DATA) -> RecipeTimes:
        try:
            data = load_file(path)
        except (OSError, JsonInputError) as exc:
            raise UsageError(f"{path}: cannot read the recipe time table ({exc})") from None
        return cls.from_json(data, str(path))
