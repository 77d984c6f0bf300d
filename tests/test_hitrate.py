"""Compiler-cache hit rates read from the ledger, and the factor they put on a cell's build time."""

from __future__ import annotations

import json

import pytest

from farm.schedule.hitrate import COMPILE_SHARE, HitRates, read_hit_rates
from tests.support.ledgermaker import make_entry

KEY = ("flash_attn", "12.8", "2.8", "cp311", "linux_x86_64")


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
                      + _line("cp310", None, None) + "not json\n")
    rates = read_hit_rates(ledger)
    assert rates.cells[KEY] == 0.0
    assert rates.cells[(*KEY[:3], "cp312", KEY[4])] == 0.9
    assert rates.typical[("flash_attn", "linux_x86_64")] == 0.8  # the median of 0, 0.8, 0.9
    assert read_hit_rates(tmp_path / "missing.jsonl") == HitRates.none()


def test_the_factor_moves_a_duration_from_its_own_hit_share_to_the_expected_one() -> None:
    rates = HitRates.of([(KEY, 100, 0), ((*KEY[:3], "cp312", KEY[4]), 100, 100)])
    expected = rates.expected(KEY)
    assert expected == 0.5
    # recorded cold: expected to hit half its steps next time
    assert rates.factor(KEY) == pytest.approx(1 - COMPILE_SHARE * 0.5)
    # recorded fully warm: the next build is expected to compile more than it did
    warm = (*KEY[:3], "cp312", KEY[4])
    assert rates.factor(warm) == pytest.approx((1 - COMPILE_SHARE * 0.5) / (1 - COMPILE_SHARE))
    # an estimate (no recorded build of the cell) is a build without a cache
    assert rates.factor(("x", "12.8", "2.8", "cp311", "linux_x86_64"), recorded=False) == 1.0
    assert HitRates.none().factor(KEY) == 1.0
