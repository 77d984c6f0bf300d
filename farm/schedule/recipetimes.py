"""What a build costs, as measured on the reference host (``recipe_times.json``).

Each recipe's row is one cell's whole ``farm build`` (the build environment, the compile, repair,
assertion, stamp and import check) on the host ``docs/recipe-status.md`` was recorded on, with its
basis: ``measured`` (a whole build), ``probe`` (the first translation unit's time times the
package's units, ``farm build --probe``) or ``estimate`` (neither: a fork of a measured recipe, or
a guess with its reason). nvcc compiles every unit once per target, so a cell whose arch list has
another number of targets than the measured cell's is scaled by it (:meth:`RecipeTimes.seconds`).

Beside the rows, each with its basis: ``runner_factor`` (a hosted runner's seconds for one of the
reference host's), and ``fixed``: what a hosted job spends before ``farm build`` (its set-up), what
a build spends outside its compile (torch installed, the repair, assertion and import check) and
what a compile step served by the compiler cache costs.
Read once (:func:`recipe_times`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from farm.errors import UsageError
from farm.jsonread import JsonInputError, load_file

DATA = Path(__file__).with_name("recipe_times.json")
BASES = ("measured", "probe", "estimate")
FIXED = ("job_setup_s", "torch_install_s", "post_s", "post_notorch_s", "hit_cost")


@dataclass(frozen=True)
class Figure:
    value: float
    basis: str  # measured | probe | estimate
    note: str


@dataclass(frozen=True)
class RecipeTime:
    seconds: float  # one cell's cold build on the reference host
    targets: int | None  # the measured cell's targets; None: not scaled by the cell's list
    basis: str
    note: str


@dataclass(frozen=True)
class RecipeTimes:
    host: str
    measured_on: str
    runner_factor: Figure
    fixed: Mapping[str, Figure]
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

    def value(self, name: str) -> float:
        """One of :data:`FIXED`."""
        return self.fixed[name].value

    def build_fixed_s(self, linked: bool) -> float:
        """What a cell's build spends outside its compile on a hosted runner: torch installed (when
        it links torch), repair, assertion, stamp, import check."""
        if linked:
            return self.value("torch_install_s") + self.value("post_s")
        return self.value("post_notorch_s")

    def with_runner_factor(self, factor: float) -> RecipeTimes:
        return replace(self, runner_factor=Figure(factor, "estimate", "given on the command line"))

    @classmethod
    def from_json(cls, data: Any, where: str) -> RecipeTimes:
        def figure(row: Any, name: str) -> Figure:
            value, basis = row["value"], row["basis"]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}: value must be a number >= 0")
            if basis not in BASES:
                raise ValueError(f"{name}: basis must be one of {', '.join(BASES)}")
            return Figure(float(value), basis, str(row.get("note", "")))

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
            factor = figure(data["runner_factor"], "runner_factor")
            if factor.value <= 0:
                raise ValueError("runner_factor must be > 0")
            fixed = {name: figure(data["fixed"][name], name) for name in FIXED}
            return cls(str(data["host"]), str(data["measured_on"]), factor, fixed, recipes)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(f"{where}: not a recipe time table ({type(exc).__name__}: {exc})",
                             hint=f"see {DATA.name} beside farm/schedule/recipetimes.py for its shape") from None

    @classmethod
    def load(cls, path: Path = DATA) -> RecipeTimes:
        try:
            data = load_file(path)
        except (OSError, JsonInputError) as exc:
            raise UsageError(f"{path}: cannot read the recipe time table ({exc})") from None
        return cls.from_json(data, str(path))


@functools.cache
def recipe_times() -> RecipeTimes:
    """farm's own table, read once."""
    return RecipeTimes.load()
