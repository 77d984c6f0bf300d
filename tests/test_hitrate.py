"""Compiler-cache hit rates read from the ledger, and the factor they put on a cell's build time."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from farm.provenance.ledger import LedgerIndex
from farm.schedule.durations import recorded_builds
from farm.schedule.hitrate import HitRates, fixed_seconds, hit_rates_of
from farm.schedule.recipetimes import recipe_times
from tests.support.ledgermaker import make_entry

KEY = ("flash_attn", "12.8", "2.8", "cp311", "linux_x86_64")
HIT_COST = recipe_times().value("hit_cost")


def _line(python: str, compiles: int | None, hits: int | None, refused: dict[str, int] | None = None) -> str:
    entry = make_entry("flash_attn", python=python)
    if compiles is not None:
        entry["toolchain"]["compile_cache"] = {"tool": "sccache", "compiles": compiles, "hits": hits,
                                               "misses": compiles - (hits or 0)}
    if refused is not None:  # a farm that records the calls sccache refused; older lines lack the key
        entry["toolchain"]["compile_cache"]["not_cacheable"] = refused
    return json.dumps(entry) + "\n"


def test_rates_come_from_the_ledgers_recorded_counts(tmp_path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(_line("cp311", 100, 0) + _line("cp312", 100, 90) + _line("cp313", 100, 80, {"multiple input files": 20})
                      + _line("cp310", None, None))
    rates = hit_rates_of(recorded_builds(LedgerIndex.load(ledger)))
    assert rates.cells[KEY] == 0.0
    assert rates.cells[(*KEY[:3], "cp312", KEY[4])] == 0.9
    assert rates.typical[("flash_attn", "linux_x86_64")] == 0.8  # the median of 0, 0.8, 0.9


def test_a_duration_moves_from_its_own_hit_share_to_the_expected_one() -> None:
    rates = HitRates.of([(KEY, 100, 0), ((*KEY[:3], "cp312", KEY[4]), 100, 100)])
    assert rates.expected(KEY) == 0.5
    fixed = fixed_seconds(KEY)
    # recorded cold: expected to hit half its steps next time; the fixed part is not shortened
    assert rates.seconds(KEY, 3600) == pytest.approx(fixed + (3600 - fixed) * (1 - 0.5 * (1 - HIT_COST)))
    # recorded fully warm: the next build is expected to compile more than it did
    warm = (*KEY[:3], "cp312", KEY[4])
    compile_s = (3600 - fixed) / HIT_COST
    assert rates.seconds(warm, 3600) == pytest.approx(fixed + compile_s * (1 - 0.5 * (1 - HIT_COST)))
    # an estimate (no recorded build of the cell) is a build without a cache
    other = ("x", "12.8", "2.8", "cp311", "linux_x86_64")
    assert rates.seconds(other, 3600, recorded=False) == 3600
    assert HitRates({}, {}).seconds(KEY, 3600) == 3600
    # a compile job of a sharded cell is all compile
    assert rates.seconds(KEY, 3600, fixed=0.0) == pytest.approx(3600 * (1 - 0.5 * (1 - HIT_COST)))


def test_a_store_that_keeps_every_step_expects_a_recorded_cell_to_hit_all_of_them() -> None:
    """After a cold bump into an S3 store every recorded cell's steps are there: the bill of the
    next bump is the warm one, though no build has hit yet. A cell never built hits like its
    package's builds did (here: nothing)."""
    cold = HitRates.of([(KEY, 100, 0)])
    kept = replace(cold, retained=True)
    assert cold.expected(KEY) == 0.0
    assert kept.expected(KEY) == 1.0
    fixed = fixed_seconds(KEY)
    assert kept.seconds(KEY, 3600) == pytest.approx(fixed + (3600 - fixed) * HIT_COST)
    assert kept.expected(("x", "12.8", "2.8", "cp311", "linux_x86_64")) == 0.0
    assert fixed_seconds(("x", "12.8", "none", "cp311", "linux_x86_64")) < fixed
