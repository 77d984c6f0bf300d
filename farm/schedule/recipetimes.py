"""The measured build time of each recipe the repository carries (``recipe_times.json``), as the
planner's start where the ledger records nothing of a package.

Each recipe that was built whole on the repository's build host has its wall seconds there
(docs/recipe-status.md), cold (every compile step run) and, where measured, warm (every step a
compiler-cache hit), with the host they were measured on. A hosted runner is not that host:
:data:`runner_factor` scales them, an estimate with its basis beside it in the file. Pure, but
for reading the file (shipped with farm, read once).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from farm import jsonread
from farm.errors import ConfigError

DATA = Path(__file__).with_name("recipe_times.json")


@dataclass(frozen=True)
class RecipeTimes:
    """Seconds per recipe on a hosted runner: ``cold`` (the median measured cold build, scaled)
    and ``warm`` (measured with every compile step from the cache, scaled), and the basis."""

    cold: Mapping[str, float]
    warm: Mapping[str, float]
    runner_factor: float
    basis: str

    @classmethod
    def none(cls) -> RecipeTimes:
        return cls({}, {}, 1.0, "")

    @classmethod
    def of(cls, data: Any) -> RecipeTimes:
        """From the file's object; anything malformed is a :class:`ConfigError` naming it."""
        try:
            factor = float(data["runner_factor"])
            recipes = data["recipes"]
            cold = {name: statistics.median(float(s) for s in r["cold_s"]) * factor
                    for name, r in recipes.items() if r["cold_s"]}
            warm = {name: float(r["warm_s"]) * factor for name, r in recipes.items() if r.get("warm_s") is not None}
            basis = f"{data['host']}; runner factor {factor}: {data['runner_factor_basis']}"
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{DATA.name}: not the recipe times farm reads ({exc!r})", where=str(DATA)) from None
        if not 0 < factor <= 10 or any(not 0 < s < 30 * 86400 for s in (*cold.values(), *warm.values())):
            raise ConfigError(f"{DATA.name}: a time or the runner factor is out of range", where=str(DATA))
        return cls(cold, warm, factor, basis)


@functools.cache
def recipe_times() -> RecipeTimes:
    """The repository's measured recipe times (read once)."""
    return RecipeTimes.of(jsonread.loads(DATA.read_bytes()))
