"""The recipes' measured build times: read from the data farm ships, named by real recipes, and
where the ledger records nothing the planner starts from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.errors import ConfigError
from farm.schedule.cost import DEFAULT_JOB_S, PLATFORM_FACTOR, Durations, estimate
from farm.schedule.recipetimes import RecipeTimes, recipe_times

REPO = Path(__file__).resolve().parent.parent


def test_the_data_names_real_recipes_with_their_basis() -> None:
    times = recipe_times()
    recipes = {p.stem for p in (REPO / "packages").glob("*.yml")}
    assert set(times.cold) | set(times.warm) <= recipes
    assert len(set(times.cold) | set(times.warm)) >= 18
    assert "2 shared cores" in times.basis
    assert "estimate" in times.basis
    assert times.cold["gsplat"] == pytest.approx(2187 * times.runner_factor)
    assert times.cold["fused_ssim"] == pytest.approx((352 + 1278) / 2 * times.runner_factor)  # the median
    assert times.warm["gsplat"] < times.cold["gsplat"]


def test_the_plan_starts_from_a_recipes_measured_time() -> None:
    durations = Durations.of([], {"gsplat": 1000.0})
    assert estimate(("gsplat", "12.8", "2.8", "cp311", "linux_x86_64"), durations) .source == "measured"
    assert estimate(("gsplat", "12.8", "2.8", "cp311", "linux_x86_64"), durations).seconds == 1000
    assert estimate(("gsplat", "12.8", "2.8", "cp311", "win_amd64"), durations).seconds == 1000 * PLATFORM_FACTOR[
        "win_amd64"]
    # a recorded duration of the package wins; no measurement at all: the default guess
    recorded = Durations.of([(("gsplat", "12.8", "2.8", "cp310", "linux_x86_64"), 700.0)], {"gsplat": 1000.0})
    assert estimate(("gsplat", "12.8", "2.8", "cp311", "linux_x86_64"), recorded).source == "package"
    assert estimate(("other", "12.8", "2.8", "cp311", "linux_x86_64"), durations).seconds == DEFAULT_JOB_S


@pytest.mark.parametrize("data", [
    {}, {"runner_factor": "x", "recipes": {}}, {"runner_factor": 0, "recipes": {}, "host": "", "runner_factor_basis": ""},
    {"runner_factor": 1, "recipes": {"a": {"cold_s": [-1]}}, "host": "", "runner_factor_basis": ""},
    {"runner_factor": 1, "recipes": {"a": {"cold_s": "abc"}}, "host": "", "runner_factor_basis": ""},
])
def test_malformed_data_is_said(data: object) -> None:
    with pytest.raises(ConfigError, match="recipe_times.json"):
        RecipeTimes.of(data)
